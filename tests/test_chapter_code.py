"""What chapter code may do: import only what a reader has, and seed only through the shiftable mechanism."""

from __future__ import annotations

import ast
import inspect
import sys

import jupytext
import pytest

import attnbook
from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import notebooks  # noqa: E402
import reader_envs  # noqa: E402

CHAPTERS = notebooks.chapter_sources()
# A Colab reader has what Colab preinstalls (reader_envs.COLAB_PACKAGES; IPython comes with ipykernel)
# and what `pip install attnbook` brings; nothing that only builds the book (myst_nb, jupytext, sphinx).
READER_MODULES = {"attnbook", "torch", "numpy", "matplotlib", "ipywidgets", "IPython"}
RNG_SEEDERS = {"manual_seed", "default_rng", "RandomState", "Random", "seed"}


def chapter_code(chapter) -> ast.Module:
    """Every code cell of a chapter as one module (IPython magics left out)."""
    body = []
    for cell in jupytext.read(chapter).cells:
        if cell.cell_type == "code":
            source = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!")))
            body += ast.parse(source).body
    return ast.Module(body=body, type_ignores=[])


def _is_call_to(node, dotted: str) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == dotted


def seed_problems(tree: ast.AST) -> list[str]:
    """Places where a chapter seeds an RNG without going through attnbook.seed / attnbook.generator."""
    local = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}  # chapter helpers shift inside
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in RNG_SEEDERS and ast.unparse(node.func) != "attnbook.seed" and node.args \
                and not _is_call_to(node.args[0], "attnbook.seed"):
            problems.append(ast.unparse(node))
        for kw in node.keywords:
            if kw.arg == "seed" and isinstance(kw.value, ast.Constant) and name not in local:
                problems.append(ast.unparse(node))
        # A package function with a seed parameter must be given one: its default would not shift.
        if isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "attnbook":
            target = getattr(attnbook, node.func.attr, None)
            try:
                params = inspect.signature(target).parameters if callable(target) else {}
            except (TypeError, ValueError):
                params = {}
            if "seed" in params and not any(kw.arg == "seed" for kw in node.keywords) \
                    and len(node.args) <= list(params).index("seed"):
                problems.append(ast.unparse(node) + "  (no seed: the package default does not shift)")
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapters_import_only_what_a_reader_has(chapter):
    stdlib = sys.stdlib_module_names
    found = set()
    for node in ast.walk(chapter_code(chapter)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    assert {m for m in found if m not in stdlib} <= READER_MODULES, found - stdlib - READER_MODULES


def test_reader_modules_are_in_the_colab_environment():
    colab = {p.split("==")[0] for p in reader_envs.COLAB_PACKAGES} | {"attnbook", "IPython"}
    assert READER_MODULES <= colab


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_seed_is_shiftable(chapter):
    problems = seed_problems(chapter_code(chapter))
    assert problems == [], "use attnbook.seed(n) / attnbook.generator(n): " + "; ".join(problems)


@pytest.mark.parametrize("source, bad", [
    ("torch.manual_seed(0)", True),
    ("g = torch.Generator().manual_seed(3)", True),
    ("np.random.default_rng(7)", True),
    ("attnbook.DigitTask('copy', seed=0)", True),
    ("attnbook.train_position_model('rope', train_len=16)", True),   # package default seed
    ("torch.manual_seed(attnbook.seed(0))", False),
    ("g = attnbook.generator(3)", False),
    ("attnbook.DigitTask('copy', seed=attnbook.seed(0))", False),
    ("def batches(seed):\n    return attnbook.generator(seed)\nbatches(seed=0)", False),
])
def test_the_seed_check_catches_literal_seeds(source, bad):
    assert bool(seed_problems(ast.parse(source))) == bad


def test_every_package_module_is_listed_in_the_index_table():
    """The table of 「这本书是怎样做成的」 says where each module of attnbook is used; a new module must appear there."""
    package = ROOT / "code" / "attnbook"
    index = (ROOT / "chapters" / "making.md").read_text(encoding="utf-8")
    modules = [p.relative_to(package).with_suffix("").as_posix() for p in package.rglob("*.py") if p.stem != "__init__"]
    missing = [m for m in modules if f"`{m}`" not in index]
    assert len(modules) > 30 and not missing, f"modules missing from chapters/making.md: {missing}"

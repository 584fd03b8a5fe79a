"""Sphinx extension: the ``{exercise-list}`` directive, the 编程练习 appendix's table of every coding exercise.

One row per exercise of ``attnbook.exercises``, in the order of ``exercises.names()``: its chapter, its name
(linked to the exercise in the chapter), the signature, what it asks, and the cases its check covers (``covers``),
with the section that teaches it (linked). The registry is read from the package's source, not imported: the
build must not import torch. ``registry()`` is tested to equal the imported registry
(tests/test_exercise_notebooks.py), so an exercise registered in a way this reader cannot see fails a test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.util.docutils import SphinxDirective

from provenance_page import table_frame

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "code" / "attnbook" / "exercises"
FIELDS = ("name", "signature", "chapter", "covers", "section", "summary")   # Exercise's fields, in order
HEADERS = ("章节", "练习", "签名与要求", "检查覆盖的情形")


def _exercise_fields(call: ast.Call, where: str) -> dict:
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Exercise"):
        raise ValueError(f"{where}: register() needs Exercise(...) or a name bound to one, got {ast.unparse(call)}")
    try:
        values = dict(zip(FIELDS, (ast.literal_eval(a) for a in call.args)))
        values |= {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except ValueError:
        raise ValueError(f"{where}: the fields of {ast.unparse(call)[:80]} must be literals") from None
    return {f: values.get(f, () if f == "covers" else "") for f in FIELDS} | {"covers": list(values.get("covers", ()))}


def chapter_titles(package: Path = PACKAGE) -> dict[str, str]:
    """The package's ``CHAPTERS``: chapter file stem -> title, in book order."""
    init = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    return next(ast.literal_eval(n.value) for n in init.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "CHAPTERS")


def registry(package: Path = PACKAGE) -> list[dict]:
    """Every exercise's fields, ordered as ``exercises.names()`` orders them: chapters in book order (the
    package's ``CHAPTERS``), then registration order (modules as ``__init__`` imports them, calls top to bottom)."""
    init = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    chapters = chapter_titles(package)
    modules = [a.name for n in init.body if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module is None
               for a in n.names]
    found = []
    for module in modules:
        path = package / f"{module}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = {n.targets[0].id: n.value for n in tree.body
                 if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", None) == "register":
                first = node.value.args[0]
                call = bound.get(first.id) if isinstance(first, ast.Name) else first
                found.append(_exercise_fields(call, f"{path.name}:{node.lineno}"))
    order = list(chapters)
    rank = lambda e: order.index(e["chapter"]) if e["chapter"] in order else len(order)  # noqa: E731
    return sorted(found, key=rank)   # stable: registration order within a chapter


def chapter_labels(source: str, name: str) -> tuple[str | None, dict[str, str]]:
    """The label of the {exercise} whose check cell checks ``name``, and section title -> label of the page."""
    sections = {m[2].strip(): m[1] for m in re.finditer(r"^\(([\w-]+)\)=\s*\n#+\s+(.*)$", source, re.M)}
    at = source.find(f'exercises.check("{name}"')
    labels = [(m.start(), m[1]) for m in re.finditer(r"^:::+\{exercise\}[^\n]*\n:label:\s*([\w-]+)", source, re.M)]
    before = [label for start, label in labels if 0 <= start < at]
    return (before[-1] if before else None), sections


def _xref(docname: str, target: str, reftype: str, text: str, literal: bool = False) -> pending_xref:
    ref = pending_xref(refdoc=docname, reftarget=target, reftype=reftype, refdomain="std",
                       refexplicit=reftype == "ref", refwarn=True)
    ref += nodes.literal(text=text) if literal else nodes.inline(text=text)
    return ref


class ExerciseListDirective(SphinxDirective):
    def run(self):
        srcdir = Path(self.env.srcdir)
        for path in sorted(PACKAGE.glob("*.py")):
            self.env.note_dependency(str(path))          # re-read when an exercise changes
        try:
            exercises, titles = registry(), chapter_titles()
        except (ValueError, OSError, StopIteration) as exc:
            raise self.error(f"exercise-list: cannot read the registry: {exc}") from None
        table, body = table_frame(HEADERS, "attnbook-exercise-table")
        previous = None
        for ex in exercises:
            doc = f"chapters/{ex['chapter']}"
            in_book = doc in self.env.found_docs            # a chapter not (yet) in the book: no links
            source_path = srcdir / f"{doc}.md"
            source = source_path.read_text(encoding="utf-8") if in_book and source_path.exists() else ""
            if source:
                self.env.note_dependency(str(source_path))
            label, sections = chapter_labels(source, ex["name"])
            chapter = nodes.paragraph()
            if ex["chapter"] != previous:
                chapter += _xref(self.env.docname, f"/{doc}", "doc", ex["chapter"]) if in_book \
                    else nodes.inline(text=titles.get(ex["chapter"], ex["chapter"]))
            previous = ex["chapter"]
            name = nodes.paragraph("", "", _xref(self.env.docname, label, "ref", ex["name"], literal=True)
                                   if label else nodes.literal(text=ex["name"]))
            what = [nodes.paragraph("", "", nodes.literal(text=ex["signature"]))]
            if ex["summary"]:
                what.append(nodes.paragraph(text=ex["summary"]))
            if ex["section"]:
                teach = nodes.paragraph(text="讲解：")
                target = sections.get(ex["section"])
                teach += _xref(self.env.docname, target, "ref", ex["section"]) if target else \
                    nodes.inline(text=ex["section"])
                what.append(teach)
            covers = nodes.paragraph(text="；".join(ex["covers"]))
            body += nodes.row("", *[nodes.entry("", *c) for c in ([chapter], [name], what, [covers])])
        return [table]


def setup(app):
    app.add_directive("exercise-list", ExerciseListDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

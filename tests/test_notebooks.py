"""Generated notebooks (make notebooks): install cell, plain Markdown, and a clean top-to-bottom run."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import errata_count  # noqa: E402
import notebooks  # noqa: E402
import run_notebooks  # noqa: E402

OUT = ROOT / "_build" / "notebooks"
CHAPTERS = notebooks.chapter_sources()


def _generated(chapter: Path) -> Path:
    path = OUT / chapter.relative_to(ROOT).with_suffix(".ipynb")
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make notebooks` (make test does)")
    return path


def test_every_chapter_has_a_notebook():
    assert CHAPTERS, "no executable chapter found in _toc.yml"
    for chapter in CHAPTERS:
        _generated(chapter)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_first_cell_installs_the_package_at_the_commit_the_book_was_built_from(chapter):
    nb = nbformat.read(_generated(chapter), as_version=4)
    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    first = nb.cells[0]
    assert first.cell_type == "code"
    assert 'find_spec("attnbook") is None' in first.source
    assert f"git+{repo['url'].rstrip('/')}.git@{os.environ.get('ATTNBOOK_REF') or head}\"" in first.source


def test_first_cell_explains_in_chinese_when_the_install_fails(tmp_path):
    """No network or a wrong repository: the reader gets what to do instead, not a pip traceback."""
    cell = notebooks.INSTALL_CELL.format(url=f"file://{tmp_path}/no-such-repo", ref="0" * 40)
    # -S: no site-packages, so attnbook is not importable and the cell tries to install it (and fails).
    done = subprocess.run([sys.executable, "-S", "-c", cell], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "无法安装本书的软件包 attnbook" in done.stderr and "pip install ." in done.stderr
    assert "no-such-repo" in done.stderr  # names what it tried to install


def test_install_cell_pins_attnbook_ref_when_set(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_REF", "v1.2.3")
    assert notebooks.book_ref() == "v1.2.3"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_markdown_has_no_sphinx_only_syntax_left(chapter):
    nb = nbformat.read(_generated(chapter), as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for token in ("{glue", "{exercise}", "{solution}", "{literalinclude}", "{cite}", ":::{", "{ref}", "{{", "](#"):
        assert token not in text, token


def test_literalinclude_becomes_the_exact_source():
    module = importlib.import_module("attnbook.softmax")  # attnbook.softmax is also the function

    text = "```{literalinclude} ../code/attnbook/softmax.py\n:pyobject: softmax\n:language: python\n```"
    out = notebooks.to_plain_markdown(text, ROOT / "chapters" / "softmax.md")
    assert out == f"```python\n{inspect.getsource(module.softmax).rstrip()}\n```"


def test_directives_and_roles_become_plain_markdown():
    text = (":::{exercise}\n:label: ex-a\n\n求 $x$ {cite}`bridle1990probabilistic`。\n:::\n\n"
            ":::{solution} ex-a\n:class: dropdown\n\n答案是 {glue:text}`p_max:.3f`。\n:::\n\n"
            ":::{admonition} 勘误\n:class: warning\n\n原文有误。\n:::")
    out = notebooks.to_plain_markdown(text, ROOT / "chapters" / "softmax.md")
    assert "**练习**" in out and "[bridle1990probabilistic]" in out
    assert "<details><summary>解答</summary>" in out and "`p_max`" in out
    assert "> **勘误**" in out and "> 原文有误。" in out
    assert ":label:" not in out and ":class:" not in out


def test_substitutions_and_section_links_become_plain_text():
    text = "本附录共 {{ errata_count }} 条，见 [为什么要除以 $\\sqrt{d_k}$](#scaled-attention-why-scale)。"
    out = notebooks.to_plain_markdown(text, ROOT / "chapters" / "errata.md")
    entries = len(errata_count.entry_labels(ROOT / "chapters"))
    assert entries > 20 and out == f"本附录共 {entries} 条，见 为什么要除以 $\\sqrt{{d_k}}$。"


def test_comparison_ignores_where_the_kernel_split_a_stream_but_not_its_content():
    def notebook(*chunks):
        cell = nbformat.v4.new_code_cell("print(x)")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=c) for c in chunks]
        return nbformat.v4.new_notebook(cells=[cell])

    merged_by_myst_nb = run_notebooks.text_outputs(notebook("a 1.5  ✓\n\nb 2.0\n"))   # chunk strip + "\n"
    live_kernel = run_notebooks.text_outputs(notebook("a 1.5  ✓", "\nb 2.0\n"))
    other_value = run_notebooks.text_outputs(notebook("a 1.6  ✓\nb 2.0\n"))
    assert merged_by_myst_nb == live_kernel != other_value

"""Generated notebooks (make notebooks): install cell, the build's numbers and links in plain Markdown, a clean run."""

from __future__ import annotations

import html
import importlib
import inspect
import os
import re
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


MYST_ROLE = re.compile(r"\{[a-z][\w:-]*\}`")       # {ref}`…`, {glue:text}`…`, {term}`…`
PASTED = re.compile(r'<span class="pasted-text">(.*?)</span>', re.S)   # a {glue:text} value on the HTML page
MARKED = re.compile(r"<b>(.*?)</b>", re.S)                              # the same value in the notebook


def _markdown(chapter: Path) -> str:
    nb = nbformat.read(_generated(chapter), as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_markdown_has_no_sphinx_only_syntax_left(chapter):
    text = _markdown(chapter)
    for token in ("{glue", "{exercise}", "{solution}", "{literalinclude}", "{cite}", ":::{", "{ref}", "{{", "](#",
                  "见上方代码的计算结果", "练习练习"):
        assert token not in text, token
    assert not MYST_ROLE.search(text), MYST_ROLE.search(text)[0]
    assert not notebooks.LABEL_LINE.search(text), notebooks.LABEL_LINE.search(text)[0]


def test_pages_have_no_doubled_exercise_word_nor_english_toggle():
    """"练习 {ref}`ex-…`" prints 练习练习 (the reference already says 练习 N.M); hidden cells' toggles are Chinese."""
    pages = sorted((ROOT / "_build" / "html" / "chapters").glob("*.html"))
    assert pages, "run `make book` first"
    texts = {p.name: re.sub(r"<[^>]+>|\s+", "", p.read_text(encoding="utf-8")) for p in pages}
    assert not [name for name, text in texts.items() if "练习练习" in text]
    assert not [name for name, text in texts.items() if "codecellsource" in text or "codecelloutputs" in text]
    assert any("显示代码" in text for text in texts.values())


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_number_glued_on_the_page_is_in_the_notebook_in_order(chapter):
    """The page's {glue:text} values, formatted as printed, appear in the notebook in the same order, marked <b>."""
    page = ROOT / "_build" / "html" / chapter.relative_to(ROOT).with_suffix(".html")
    on_page = [html.unescape(v).strip() for v in PASTED.findall(page.read_text(encoding="utf-8"))]
    in_notebook = iter(html.unescape(v).strip() for v in MARKED.findall(_markdown(chapter)))
    missing = [v for v in on_page if v not in in_notebook]   # consumes the iterator: a subsequence, in order
    assert not missing, f"{len(missing)} of {len(on_page)} glued values not in the notebook in order: {missing[:5]}"


def test_notebook_links_point_at_the_published_pages():
    text = _markdown(ROOT / "chapters" / "softmax.md")
    base = notebooks.book_build().baseurl
    links = re.findall(r"\]\((https?://[^)]+)\)", text)
    assert any(u.startswith(f"{base}chapters/") and "#" in u for u in links)
    assert "本书的构建" in text and "<b>" in text


def test_literalinclude_becomes_the_exact_source():
    module = importlib.import_module("attnbook.softmax")  # attnbook.softmax is also the function

    text = "```{literalinclude} ../code/attnbook/softmax.py\n:pyobject: softmax\n:language: python\n```"
    out = notebooks.to_plain_markdown(text, ROOT / "chapters" / "softmax.md")
    assert out == f"```python\n{inspect.getsource(module.softmax).rstrip()}\n```"


class FakeBuild:
    """Stands in for notebooks.Build: one glued value, and links to an example site."""

    baseurl = "https://example.org/book/"

    def glued(self, docname):
        return {"p_max": {"text/plain": "0.6652409557748219"}, "best": {"text/markdown": "**缩放**", "text/plain": "x"}}

    def link(self, role, target, docname):
        return ("练习 2.1" if target.startswith("ex-") else "减去最大值"), f"{self.baseurl}{docname}.html#{target}"


def test_directives_and_roles_become_plain_markdown():
    text = ("(softmax-x)=\n## 标题\n\n:::{exercise}\n:label: ex-a\n\n求 $x$ {cite}`bridle1990probabilistic`。\n:::\n\n"
            ":::{solution} ex-a\n:class: dropdown\n\n答案是 {glue:text}`p_max:.3f`，最好的是{glue:md}`best`。\n:::\n\n"
            ":::{admonition} 勘误\n:class: warning\n\n原文有误，见 {ref}`softmax-stability` 与 {ref}`那一节 <softmax-x>`。\n:::\n\n"
            ":::{note} 细节\n:class: dropdown\n\n{term}`注意力 <attention>` 和 {term}`logits`。\n:::")
    out = notebooks.to_plain_markdown(text, ROOT / "chapters" / "softmax.md", FakeBuild())
    assert "> **练习 2.1**" in out and "[bridle1990probabilistic]" in out
    assert "<details><summary>解答（点击展开）</summary>" in out and "答案是 <b>0.665</b>" in out and "<b>**缩放**</b>" in out
    assert "> **勘误**" in out and "> 原文有误，见 [减去最大值](https://example.org/book/chapters/softmax.html#softmax-stability)" in out
    assert "[那一节](https://example.org/book/chapters/softmax.html#softmax-x)" in out
    assert "<details><summary>细节</summary>" in out and "注意力 和 logits。" in out
    assert ":label:" not in out and ":class:" not in out and "(softmax-x)=" not in out and out.startswith("## 标题")


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

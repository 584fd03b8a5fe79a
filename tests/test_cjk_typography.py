"""Chinese typography on the built pages: no space between two Chinese characters, no literal ``**``.

A source line break between two CJK characters would show as a space in Chromium; the build joins them
(``code/booktools/cjk_lines.py``). Counted in the running text of paragraphs, list items, table cells,
definition terms and captions, with code, maths and scripts left out (a code span is a boundary, not text).
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser

import pytest

from conftest import ROOT, chapter_pages

sys.path.insert(0, str(ROOT / "code" / "booktools"))

CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef\u2018\u2019\u201c\u201d\u2014\u2026"
SPACE_BETWEEN_CJK = re.compile(f"(?<=[{CJK}])\\s+(?=[{CJK}])")
BLOCKS = {"p", "li", "td", "th", "dt", "dd", "caption", "figcaption"}
VERBATIM = {"code", "pre", "script", "style", "kbd", "samp", "textarea", "svg"}
VOID = {"br", "img", "input", "meta", "link", "hr", "wbr", "source", "col", "area", "base", "embed", "track"}
GAP = "\x00"  # what code or maths leaves in the text: never CJK, never a space


class _Prose(HTMLParser):
    """Collects the own text of each block element (nested blocks are blocks of their own)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []   # (tag, verbatim)
        self.blocks: list[list[str]] = []         # open blocks' text
        self.done: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        verbatim = tag in VERBATIM or "math" in classes or (self.stack and self.stack[-1][1])
        if verbatim and self.blocks and not (self.stack and self.stack[-1][1]):
            self.blocks[-1].append(GAP)
        self.stack.append((tag, bool(verbatim)))
        if tag in BLOCKS and not verbatim:
            self.blocks.append([])

    def handle_endtag(self, tag):
        while self.stack:
            open_tag, verbatim = self.stack.pop()
            if open_tag in BLOCKS and not verbatim and self.blocks:
                self.done.append("".join(self.blocks.pop()))
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self.blocks and not (self.stack and self.stack[-1][1]):
            self.blocks[-1].append(data)


def prose_blocks(page_html: str) -> list[str]:
    """The running text of each paragraph, list item, table cell … of a page (code and maths left out)."""
    body = page_html[page_html.find("<main"):] if "<main" in page_html else page_html
    parser = _Prose()
    parser.feed(body)
    parser.close()
    return parser.done


def cjk_spaces(text: str) -> list[str]:
    """Each whitespace run between two CJK characters, with two characters of context either side."""
    return [text[max(0, m.start() - 2):m.end() + 2] for m in SPACE_BETWEEN_CJK.finditer(text)]


def page_problems(page_html: str) -> tuple[list[str], list[str]]:
    """(spaces between CJK characters, blocks showing a literal ``**``) on one page."""
    blocks = prose_blocks(page_html)
    return [s for b in blocks for s in cjk_spaces(b)], [b[:80] for b in blocks if "**" in b]


# --- the checker itself, on small pages ----------------------------------------------------------------------

def test_checker_sees_a_space_between_chinese_characters_and_literal_asterisks():
    page = ("<main><p>查阅源序列。\n如今大多数人</p><ul><li><p>去掉编码器， 也去掉</p></li></ul>"
            "<table><tr><td>单元 格</td></tr></table><p>这样的**词元**</p></main>")
    spaces, stars = page_problems(page)
    assert [s.strip() for s in spaces] == ["列。\n如今", "器， 也去", "单元 格"]
    assert stars == ["这样的**词元**"]


def test_checker_leaves_code_maths_and_latin_neighbours_alone():
    page = ('<main><p>中文 word 中文，<code>中 文</code> 中文，<span class="math">\\(中 文\\)</span>\n中文</p>'
            '<pre>代码 **块**</pre><p>用 <code class="literal">a**b</code> 乘方</p></main>')
    assert page_problems(page) == ([], [])


# --- the transform, on strings and on a small Sphinx project ------------------------------------------------

def test_join_lines_only_between_two_cjk_characters():
    from cjk_lines import join_lines

    assert join_lines("查阅源序列。\n如今大多数人") == "查阅源序列。如今大多数人"
    assert join_lines("编码器，\n  也去掉“注意力”\n的") == "编码器，也去掉“注意力”的"
    assert join_lines("中文\nword\n中文") == "中文\nword\n中文"           # Latin neighbours keep their space
    assert join_lines("中文 中文") == "中文 中文"                           # a typed space is the author's
    assert join_lines("\n的", before="词") == "的" and join_lines("的\n", after="x") == "的\n"
    assert join_lines("，见 ", after="练") == "，见" and join_lines(" 一章", before="力") == "一章"   # beside a role
    assert join_lines("，见 ", after="S") == "，见 " and join_lines("甲 · 乙") == "甲 · 乙"


SAMPLE = """# 标题

第一行，
第二行，`code`
中文，$x$
中文 word
中文。

英文 word
接着
中文。

(sec)=
## 小节

- 列表项
  续行；见
  {ref}`sec`
  与**粗体**，见 {ref}`sec` 一节
  文字

| 列 |
|---|
| 单元格 |
"""


def _build(tmp_path, extensions) -> str:
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "conf.py").write_text(f"extensions = {extensions!r}\nmyst_enable_extensions = ['dollarmath']\n")
    (src / "index.md").write_text(SAMPLE, encoding="utf-8")
    Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "doctrees"), "html",
           status=None, warning=None, freshenv=True).build()
    return (tmp_path / "out" / "index.html").read_text(encoding="utf-8")


def test_a_sphinx_build_with_the_transform_has_no_space_between_chinese_characters(tmp_path):
    without = _build(tmp_path / "a", ["myst_parser"])
    assert len(page_problems(without)[0]) == 8                            # the control: the breaks show
    page = _build(tmp_path / "b", ["myst_parser", "cjk_lines"])
    assert page_problems(page) == ([], [])
    assert "续行；见<a" in page and "小节</span></a>与<strong>粗体</strong>，见<a" in page   # across roles
    assert "小节</span></a>一节文字" in page
    assert "word\n接着中文。" in page                     # the second of two equal "\n" Text nodes is the one joined
    assert "中文 word" in page.replace("\n", " ") and "<span class=\"pre\">code</span></code>\n中文" in page


# --- the built book --------------------------------------------------------------------------------------------

@pytest.mark.book
def test_no_space_between_chinese_characters_and_no_literal_asterisks(built_html):
    found = {}
    for path in chapter_pages(built_html):
        spaces, stars = page_problems(path.read_text(encoding="utf-8"))
        if spaces or stars:
            found[path.relative_to(built_html).as_posix()] = (len(spaces), spaces[:3], stars[:3])
    assert not found, "\n".join(f"{p}: {n} spaces, e.g. {s!r}; literal **: {a!r}" for p, (n, s, a) in found.items())

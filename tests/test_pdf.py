"""The PDF edition (``make pdf``): every chapter in order, typeset maths, embedded fonts, bookmarks, margins."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "booktools"))
import pdf_edition  # noqa: E402

import pypdf  # noqa: E402  (structure: fonts, outline)
import pypdfium2  # noqa: E402  (text and glyph positions: PDFium, fast)

PDF = ROOT / "_build" / "pdf" / pdf_edition.NAME
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$")  # Sphinx's maths delimiters, left only where MathJax did not run


def chapter_titles() -> list[str]:
    """Each chapter's and appendix's title (its first '# ' line), in table-of-contents order."""
    docs, _ = pdf_edition.toc_order()
    titles = []
    for doc in docs:
        text = (ROOT / f"{doc}.md").read_text(encoding="utf-8")
        titles.append(next(line[2:].strip() for line in text.splitlines() if line.startswith("# ")))
    return titles


@pytest.fixture(scope="module")
def reader():
    assert PDF.exists(), "run `make pdf` first (make test does)"
    return pypdf.PdfReader(PDF)


@pytest.fixture(scope="module")
def document():
    return pypdfium2.PdfDocument(PDF)


@pytest.fixture(scope="module")
def pages_text(document) -> list[str]:
    return [page.get_textpage().get_text_range() for page in document]


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def chapter_bookmarks(reader) -> list[tuple[str, int]]:
    """(title, 0-based page) of each chapter-level bookmark: the children of the part bookmarks."""
    _, parts = pdf_edition.toc_order()
    captions, marks, outline = {squash(c) for c in parts.values()}, [], reader.outline
    for item, children in zip(outline, outline[1:]):
        if not isinstance(item, list) and squash(item.title) in captions and isinstance(children, list):
            marks += [(squash(c.title), reader.get_destination_page_number(c)) for c in children if not isinstance(c, list)]
    return marks


def test_every_chapter_in_table_of_contents_order(reader, pages_text):
    marks = chapter_bookmarks(reader)
    titles = [squash(t) for t in chapter_titles()]
    assert len(marks) == len(titles), [m for m, _ in marks]
    pages = []
    for title, (mark, page) in zip(titles, marks):
        assert mark.endswith(title), f"bookmark {mark!r} where chapter {title!r} was expected"
        assert title in squash(pages_text[page]), f"chapter {title!r} not on its bookmark's page {page + 1}"
        pages.append(page)
    assert pages == sorted(pages) and len(set(pages)) == len(pages)


def test_maths_typeset_and_no_replacement_glyphs(pages_text):
    for number, text in enumerate(pages_text, 1):
        assert not RAW_TEX.search(text), f"raw TeX on page {number}: {RAW_TEX.search(text).group()}"
        assert "\ufffd" not in text, f"a replacement character (missing glyph) on page {number}"


def test_every_font_embedded(reader):
    """Each font carries its glyphs: an embedded font program, or Type 3 glyph outlines (Chromium's Skia writes
    the CFF-flavoured Noto CJK and MathJax's fonts that way); each maps back to Unicode, so text can be searched."""
    missing, type3 = [], 0
    for page in reader.pages:
        for font in (page.get("/Resources", {}).get("/Font", {}) or {}).values():
            font = font.get_object()
            if font.get("/Subtype") == "/Type3":
                type3 += 1
                if "/CharProcs" not in font or "/ToUnicode" not in font:
                    missing.append("Type3 without glyphs or ToUnicode")
                continue
            descendants = font.get("/DescendantFonts")
            descriptor = (descendants[0].get_object() if descendants else font).get("/FontDescriptor")
            if descriptor is None or not any(k in descriptor.get_object() for k in ("/FontFile", "/FontFile2", "/FontFile3")):
                missing.append(str(font.get("/BaseFont")))
    assert type3 and not missing, f"fonts whose glyphs are not in the file: {sorted(set(missing))}"


def test_bookmarks_for_parts_chapters_and_sections(reader):
    def walk(items, depth=0):
        for item in items:
            if isinstance(item, list):
                yield from walk(item, depth + 1)
            else:
                yield depth, squash(item.title)

    marks = list(walk(reader.outline))
    titles = {title for _, title in marks}
    for title in chapter_titles():
        assert any(squash(title) in t for t in titles), f"no bookmark for {title!r}"
    assert max(depth for depth, _ in marks) >= 2, "sections have no bookmarks under their chapters"
    assert squash(pdf_edition.PREFACE_TITLE) in titles


def test_title_page_names_the_commit_and_pages_are_numbered(pages_text):
    assert re.search(r"构建自提交\s*[0-9a-f]{7,}", pages_text[0])
    total = len(pages_text)
    for number in (2, total // 2, total):
        assert re.search(rf"\b{number}\s*/\s*{total}\b", pages_text[number - 1]), f"no page number on page {number}"


def test_no_text_runs_past_the_right_margin(document):
    """Text drawn beyond the page's right edge was cut off: code, tables and maths must wrap inside."""
    offenders = []
    for number, page in enumerate(document, 1):
        width = page.get_width()
        text = page.get_textpage()
        for i in range(text.count_chars()):
            left, _, right, _ = text.get_charbox(i)
            stretched = right - left > 60  # MathJax's stretchy braces report a box far wider than their ink
            if right > width - 5 and not stretched and text.get_text_range(i, 1).strip():
                offenders.append((number, round(right), text.get_text_range(max(0, i - 10), 20)))
                break
    assert not offenders, f"text past the right margin: {offenders[:10]}"


def test_widgets_printed_with_their_note(pages_text):
    text = squash("\n".join(pages_text))
    assert text.count(squash(pdf_edition.WIDGET_NOTE)) >= 11  # the book's eleven widgets, each once or more


def test_widget_ids_unique_across_the_single_page():
    block = '<div id="attnbook-widget-{0}" class="attnbook-static-widget" data-widget="W"></div><script>' \
            'render({{ el: document.getElementById("attnbook-widget-{0}") }});</script>'
    page = "<p>a</p>" + block.format(0) + "<p>b</p>" + block.format(1) + block.format(0)  # two chapters' widgets
    out = pdf_edition.unique_widget_ids(page)
    ids = re.findall(r'id="(attnbook-widget-\d+)"', out)
    assert ids == ["attnbook-widget-0", "attnbook-widget-1", "attnbook-widget-2"]
    assert re.findall(r'getElementById\("(attnbook-widget-\d+)"\)', out) == ids
    assert out.startswith("<p>a</p>") and "<p>b</p>" in out


def test_size_and_page_count_reported(reader, capsys):
    megabytes = PDF.stat().st_size / 2**20
    with capsys.disabled():
        print(f"\n{PDF.name}: {len(reader.pages)} pages, {megabytes:.1f} MB")
    assert megabytes <= 40

"""The PDF edition (``make pdf``): every chapter in order, typeset maths, embedded fonts, bookmarks, margins,
and a text layer that is the page's text (no radicals for ideographs)."""

from __future__ import annotations

import os
import re
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "booktools"))
import pdf_edition  # noqa: E402
import pdf_text  # noqa: E402

import pypdf  # noqa: E402  (structure: fonts, outline)
import pypdfium2  # noqa: E402  (text and glyph positions: PDFium, fast)

PDF = Path(os.environ.get("ATTNBOOK_PDF", ROOT / "_build" / "pdf" / pdf_edition.NAME))  # another: ATTNBOOK_PDF
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


# The text layer: what a reader's search and copy get, read through each font's ToUnicode map as written
# (pypdf reads it literally; PDFium's text normalizes compatibility characters, so it would hide a radical).
WORDS = ("注意力", "用", "一", "长", "大", "力")


def literal_text(reader, pages) -> str:
    return "".join(reader.pages[number].extract_text() for number in pages)


def test_character_maps_name_no_radical(reader):
    """Every character a reader can extract comes through a ToUnicode map: none may give a radical
    (U+2E80–U+2EFF, U+2F00–U+2FDF; the prose uses none), e.g. ⼒ U+2F12 for the 力 the page shows."""
    found = {}
    for number in sorted({ref.idnum for page in reader.pages
                          for font in (page.get("/Resources", {}).get("/Font", {}) or {}).values()
                          for ref in [font.get_object().get("/ToUnicode")] if ref is not None}):
        for radical in pdf_text.radicals_in_cmap(reader.get_object(number).get_data()):
            found.setdefault(chr(radical), number)
    assert not found, f"{len(found)} radicals in the text layer, e.g. {sorted(found)[:12]} (pdf_text.fix_pdf not run?)"


@pytest.fixture(scope="module")
def sample(reader):
    """Each chapter's first page and every 25th page: few enough for pypdf's text extraction (≈0.2 s a page)."""
    pages = {page for _, page in chapter_bookmarks(reader)} | set(range(1, len(reader.pages), 25))
    return sorted(pages)


def test_extracted_text_is_the_pages_text(reader, pages_text, sample):
    """pypdf's text of the sampled pages: no radical, every chapter title as the HTML has it (most contain 注意力),
    and 注意力, 用, 一 … as often as on the printed page (PDFium's text, which shows the page's characters)."""
    literal = squash(literal_text(reader, sample))
    radicals = sorted(set(pdf_text.RADICALS.findall(literal)))
    assert not radicals, f"radicals in the extracted text: {radicals[:12]}"
    for title in chapter_titles():
        assert squash(title) in literal, f"chapter title {title!r} not in the extracted text"
    shown = squash("".join(pages_text[number] for number in sample))
    for word in WORDS:
        assert literal.count(word) == shown.count(word) > 0, f"{word}: {literal.count(word)} extracted, {shown.count(word)} shown"


def test_attention_searchable_as_often_as_the_html_has_it(pages_text, built_single_page):
    """注意力 across the whole PDF (every map checked above, so PDFium's text is the extracted text) at least as
    often as in the text of the printed page's <main> (the PDF adds the title page; it may never lose one)."""
    main = re.search(r"<main\b.*?</main>", built_single_page, flags=re.S).group(0)
    html = re.sub(r"<(script|style|nav)\b.*?</\1>|<[^>]+>", "", main, flags=re.S)
    expected = squash(unicodedata.normalize("NFC", html)).count("注意力")
    found = squash("".join(pages_text)).count("注意力")
    assert expected >= 300 and found >= expected, (found, expected)


@pytest.fixture(scope="module")
def built_single_page() -> str:
    page = pdf_edition.SINGLE / "book.html"
    assert page.exists(), "run `make pdf` first (make test does)"
    return page.read_text(encoding="utf-8")


def test_rewritten_character_map_names_the_ideographs():
    """A map as Chromium writes it (a radical in a bfchar line and inside a bfrange's span) comes back with
    the ideographs: the Kangxi radicals' compatibility decompositions (Unicode's own), and ⻓ U+2ED3, which has
    none but shares 长's glyph in Noto CJK SC."""
    cmap = (b"/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n1 begincodespacerange\n<00> <FF>\n"
            b"endcodespacerange\n3 beginbfchar\n<80> <2F12>\n<81> <6CE8>\n<82> <2ED3>\nendbfchar\n"
            b"2 beginbfrange\n<01> <03> <2F00>\n<10> <11> <0041>\nendbfrange\nendcmap\nend\nend")
    radicals = pdf_text.radicals_in_cmap(cmap)
    assert radicals == {0x2F12, 0x2ED3, 0x2F00, 0x2F01, 0x2F02}
    fixed = pdf_text.parse_cmap(pdf_text.rewrite_cmap(cmap, pdf_text.ideographs_for(radicals)))
    nfkc = {code: unicodedata.normalize("NFKC", text) for code, text in pdf_text.parse_cmap(cmap).items()}
    assert fixed == {**nfkc, b"82": "长"}
    assert fixed[b"80"] == "力" and fixed[b"01"] == "一" and fixed[b"10"] == "A"
    assert not pdf_text.radicals_in_cmap(pdf_text.rewrite_cmap(cmap, pdf_text.ideographs_for(radicals)))


# Printed words the reader must not see: the web page's toggle labels (English by default, Chinese since
# nb_code_prompt_show/hide) have nothing to toggle on paper; "练习 {ref}`ex`" doubles the word (the reference says 练习 N.M).
NOT_PRINTED = ("Hidecodecell", "Showcodecell", "显示代码", "隐藏代码", "练习练习")


def test_no_toggle_labels_and_no_doubled_exercise_word(pages_text):
    text = squash("".join(pages_text))
    found = {word: text.count(word) for word in NOT_PRINTED if word in text}
    assert not found, found


def doubled(title: str) -> bool:
    """'1.7. 1.7. 练习练习', '怎样读怎样读': a bookmark whose text is its title twice."""
    t = squash(title)
    half = len(t) // 2
    return bool(t) and (t[:half] == t[half:] or bool(re.match(r"^(\d+(?:\.\d+)*\.)\s+\1\s", title)))


def test_outline_has_no_doubled_titles(reader):
    def walk(items):
        for item in items:
            yield from walk(item) if isinstance(item, list) else [item.title]

    titles = list(walk(reader.outline))
    bad = [t for t in titles if doubled(t)]
    assert not bad, f"{len(bad)} of {len(titles)} bookmarks doubled, e.g. {bad[:5]}"


def test_doubled_bookmark_titles_are_written_once(tmp_path):
    """pdf_text.fix_outline on bookmarks as Chromium wrote them (one print: 30 of 301 doubled); 哈哈 is a real title."""
    assert doubled("1.7. 1.7. 练习练习") and doubled("怎样读怎样读") and doubled("5.1.1. 5.1.1. 奇数维度的陷阱奇数维度的陷阱")
    assert not doubled("1.7. 练习") and not doubled("怎样读") and not doubled("1.1. 11") and not doubled("1.1. 循环")
    writer = pypdf.PdfWriter()
    writer.add_blank_page(100, 100)
    part = writer.add_outline_item("1.7. 1.7. 练习练习", 0)
    writer.add_outline_item("1.2. 1.2. 循环神经网络：RNN、LSTM 与 GRU循环神经网络：RNN、LSTM 与 GRU", 0, parent=part)
    writer.add_outline_item("怎样读怎样读", 0)
    writer.add_outline_item("4.2. 4.2. 计算流程：缩放 → Softmax计算流程：缩放 → Softmax→ 矩阵乘", 0)   # seen: a prefix doubled
    writer.add_outline_item("哈哈", 0)
    path = tmp_path / "doubled.pdf"
    writer.write(path)
    assert pdf_text.fix_outline(path) == 4 and pdf_text.fix_outline(path) == 0

    def walk(items):
        for item in items:
            yield from walk(item) if isinstance(item, list) else [item.title]

    assert list(walk(pypdf.PdfReader(path).outline)) == ["1.7. 练习", "1.2. 循环神经网络：RNN、LSTM 与 GRU", "怎样读",
                                                           "4.2. 计算流程：缩放 → Softmax→ 矩阵乘", "哈哈"]


def test_formulas_are_searchable_text(pages_text):
    """MathJax's assistive MathML is printed (1 px, near-transparent) at each formula, so its symbols are text: a
    MathML identifier is drawn in mathematical italic (𝑑 U+1D451 for $d$), which the page's prose never uses. Without
    it the text has no 𝑑 at all (a print of this book: 0; with it 752). The symbols come at the end of the page's text,
    after the prose (an absolutely positioned box is painted last), not inside the sentence."""
    text = squash("".join(pages_text))
    assert text.count("\U0001d451") >= 100, text.count("\U0001d451")

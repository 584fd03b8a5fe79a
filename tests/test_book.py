"""The built HTML book (make book): every chapter executed, offline, with its provenance line."""

from __future__ import annotations

import html
import json
import re

import pytest
import yaml

from conftest import ROOT, chapter_pages

pytestmark = pytest.mark.book
EXTERNAL_RESOURCE = re.compile(
    r"<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc=[\"']?(?:https?:)?//"
    r"|<link\b(?=[^>]*\brel=[\"']?(?:stylesheet|preload|modulepreload|icon))[^>]*\bhref=[\"']?(?:https?:)?//"
    r"|@import\s+(?:url\()?[\"']?(?:https?:)?//|url\([\"']?(?:https?:)?//",
    re.I)


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]


def executable_chapters() -> list[str]:
    return [f for f in toc_files() if "kernelspec:" in (ROOT / f"{f}.md").read_text(encoding="utf-8")]


def test_every_toc_entry_has_a_page(built_html):
    for f in toc_files():
        assert (built_html / f"{f}.html").exists(), f


@pytest.mark.parametrize("chapter", executable_chapters())
def test_chapter_was_executed_and_shows_provenance(built_html, chapter):
    page = (built_html / f"{chapter}.html").read_text(encoding="utf-8")
    found = re.search(r'class="attnbook-provenance" data-record="([^"]*)">([^<]*)<', page)
    assert found, "the chapter's last cell must be attnbook.provenance()"
    record, line = json.loads(html.unescape(found.group(1))), found.group(2)
    import torch

    assert record["torch_version"] == torch.__version__ and f"torch {torch.__version__}" in line
    assert record["seconds"] > 0 and f"用时 {record['seconds']:.1f} s" in line
    assert "cell_output" in page  # outputs are on the page


def test_landing_page_path_lists_every_numbered_chapter_with_this_builds_times(built_html):
    """The learning-path table: one row per numbered chapter, in the table of contents' order, with reading
    minutes from the chapter's main text and the seconds its provenance record says it ran."""
    import sys

    sys.path.insert(0, str(ROOT / "code" / "booktools"))
    import learning_path

    index = (ROOT / "chapters" / "index.md").read_text(encoding="utf-8")
    assert f"每分钟 {learning_path.READING_RATE} 字" in index
    page = (built_html / "chapters" / "index.html").read_text(encoding="utf-8")
    table = page[page.index("attnbook-path-table"):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]
    numbered = [f.split("/")[-1] for f in executable_chapters() if f != "chapters/errata"]
    assert [re.search(r'href="([\w_]+)\.html', r).group(1) for r in rows] == numbered
    for name, row in zip(numbered, rows):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        source = (ROOT / "chapters" / f"{name}.md").read_text(encoding="utf-8")
        chapter = (built_html / "chapters" / f"{name}.html").read_text(encoding="utf-8")
        record = json.loads(html.unescape(re.search(r'class="attnbook-provenance" data-record="([^"]*)"', chapter).group(1)))
        assert cells[3] == str(learning_path.reading_minutes(source)) and cells[4] == f"{record['seconds']:.0f}", (name, cells)


def test_learning_path_rejects_a_malformed_line():
    import sys

    sys.path.insert(0, str(ROOT / "code" / "booktools"))
    import learning_path

    assert learning_path.parse(["gpt | transformer | 问题？"]) == [("gpt", ["transformer"], "问题？")]
    with pytest.raises(ValueError, match="book-path"):
        learning_path.parse(["gpt | 问题？"])


def test_provenance_page_lists_every_chapter_with_its_time(built_html):
    page = (built_html / "chapters" / "provenance.html").read_text(encoding="utf-8")
    table = page[page.index("attnbook-provenance-table"):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]
    cells = [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows]
    assert len(cells) == len(executable_chapters())
    for row in cells:
        assert float(row[1]) > 0 and row[6] in ("✅", "超出预算"), row


def test_no_page_loads_anything_from_another_host(built_html):
    offenders = {}
    for page in list(built_html.rglob("*.html")) + list(built_html.rglob("*.css")):
        hits = EXTERNAL_RESOURCE.findall(page.read_text(encoding="utf-8", errors="replace"))
        if hits:
            offenders[str(page.relative_to(built_html))] = hits[:3]
    assert offenders == {}


def test_mathjax_is_served_by_the_book(built_html):
    page = (built_html / "chapters" / "softmax.html").read_text(encoding="utf-8")
    src = re.search(r'<script[^>]+src="([^"?]*tex-chtml\.js)[?"]', page).group(1)
    assert not src.startswith(("http:", "https:", "//"))
    assert (built_html / "chapters" / src).resolve().exists()
    fonts = built_html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert len(list(fonts.glob("*.woff"))) > 10


def test_no_require_js_or_widget_manager_from_a_cdn(built_html):
    for page in chapter_pages(built_html):
        text = page.read_text(encoding="utf-8")
        assert "require.min.js" not in text and "html-manager" not in text, page.name
        assert "THEBE_JS_URL" not in text and "sphinx-thebe.js" not in text, page.name
        assert "widget-state+json" not in text, page.name   # dead weight without the CDN widget manager


def test_every_local_image_exists(built_html):
    missing = []
    for page in chapter_pages(built_html):
        for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text(encoding="utf-8")):
            if not src.startswith("data:") and not (page.parent / src).resolve().exists():
                missing.append((page.name, src))
    assert missing == []


def test_favicon_is_served_at_the_root(built_html):
    from PIL import Image

    with Image.open(built_html / "favicon.ico") as icon:
        assert icon.format == "ICO" and icon.size == (32, 32)


def test_colab_button_opens_the_generated_notebook(built_html):
    page = (built_html / "chapters" / "softmax.html").read_text(encoding="utf-8")
    url = re.search(r'href="(https://colab\.research\.google\.com/[^"]+)"', page).group(1)
    assert url.endswith("/blob/notebooks/chapters/softmax.ipynb")


def test_gallery_lists_every_figure_and_widget_with_a_working_link(built_html):
    gallery = (built_html / "chapters" / "gallery.html").read_text(encoding="utf-8")
    expected_images, expected_widgets = [], []
    for chapter in executable_chapters():
        page = (built_html / f"{chapter}.html").read_text(encoding="utf-8")
        expected_images += re.findall(r'<img[^>]+src="[^"]*_images/([^"]+)"', page)
        expected_widgets += re.findall(r'class="attnbook-static-widget" data-widget="([^"]+)" data-title="([^"]+)"', page)
    shown = re.findall(r'<img[^>]+src="[^"]*_images/([^"]+)"', gallery)
    assert sorted(shown) == sorted(expected_images) and len(shown) > 20
    for name, title in set(expected_widgets):   # its Chinese title, then the class name a reader would call
        assert f"交互图「{title}」（<code class=\"docutils literal notranslate\"><span class=\"pre\">{name}</span></code>）" \
            in gallery, name
    assert len(set(expected_widgets)) >= 11                        # issue #19: nine or more; 11 with RopeScalingWidget
    for href in set(re.findall(r'<a class="reference internal" href="([^"]+)"', gallery)):
        path, _, anchor = href.partition("#")
        target = (built_html / "chapters" / (path or "gallery.html")).resolve()   # "#…": a chapter's heading here
        assert target.exists(), href
        if anchor:
            assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), href


WIDGET_BLOCK = re.compile(r'<div id="attnbook-widget-\d+" class="attnbook-static-widget" data-widget="([^"]+)"[^>]*>'
                          r'</div>.*?</script>', re.S)


def test_each_widget_adds_at_most_60_kb_to_its_page(built_html):
    """A widget's whole static fallback (element, CSS, JS module and the state it was built with) is what it adds;
    the page carries no second copy of its state for a widget manager."""
    sizes = {}
    for chapter in executable_chapters():
        page = (built_html / f"{chapter}.html").read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget-state+json" not in page, chapter
        for block in WIDGET_BLOCK.finditer(page):
            key = f"{chapter}: {block.group(1)}"
            sizes[key] = max(len(block.group(0).encode()), sizes.get(key, 0))
    print("\n".join(f"{k}: {v / 1000:.1f} KB" for k, v in sorted(sizes.items())))
    assert len(sizes) >= 10 and all(v <= 60_000 for v in sizes.values()), sizes


def test_errata_counts_shown_are_the_entries_and_boxes_of_the_built_book(built_html):
    errata = (built_html / "chapters" / "errata.html").read_text(encoding="utf-8")
    entries = len(set(re.findall(r'id="(erratum-[\w-]+)"', errata)))   # a section's id, or a span's when Sphinx slugs the title
    # a chapter's erratum note: a one-sentence paragraph or a collapsed box, each under an errata-<chapter>-… label
    boxes = len({label for page in chapter_pages(built_html) if page.name != "errata.html"
                 for label in re.findall(r'id="(errata-[a-z_]+-[\w-]+)"', page.read_text(encoding="utf-8"))})
    assert entries > 20 and boxes > 20
    assert f"本附录共 {entries} 条，正文中共有 {boxes} 个勘误框" in errata
    assert f"原始资料中的 {entries} 处错误" in (built_html / "chapters" / "making.html").read_text(encoding="utf-8")


def test_no_control_characters_in_chapter_sources():
    """A lost backslash turns $\\tau$ or $\\text$ into a TAB (\\b, \\f likewise) and MathJax renders it silently wrong."""
    bad = {p.name: sorted({hex(ord(c)) for c in p.read_text(encoding="utf-8") if c in "\t\b\f\v\r"})
           for p in (ROOT / "chapters").glob("*.md")}
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize("chapter", [c for c in executable_chapters() if c != "chapters/errata"])
def test_every_chapter_has_exercises_with_solutions_and_glossary_links(chapter):
    source = (ROOT / f"{chapter}.md").read_text(encoding="utf-8")
    exercises = re.findall(r"^:::\{exercise\}\n:label: (\S+)", source, re.M)
    solutions = re.findall(r"^:::\{solution(?:-start)?\} (\S+)", source, re.M)  # gated: holds code cells
    assert exercises and sorted(exercises) == sorted(solutions), chapter
    assert "{term}`" in source, chapter

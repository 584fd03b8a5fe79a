"""The built HTML book (make book): every chapter executed, offline, with its provenance line."""

from __future__ import annotations

import re
from pathlib import Path

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
    assert 'class="attnbook-provenance"' in page
    line = re.search(r'class="attnbook-provenance">([^<]*)<', page).group(1)
    import torch

    assert f"torch {torch.__version__}" in line and re.search(r"用时 \d+\.\d s", line)
    assert "cell_output" in page  # outputs are on the page


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


def test_every_local_image_exists(built_html):
    missing = []
    for page in chapter_pages(built_html):
        for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text(encoding="utf-8")):
            if not src.startswith("data:") and not (page.parent / src).resolve().exists():
                missing.append((page.name, src))
    assert missing == []


def test_colab_button_opens_the_generated_notebook(built_html):
    page = (built_html / "chapters" / "softmax.html").read_text(encoding="utf-8")
    url = re.search(r'href="(https://colab\.research\.google\.com/[^"]+)"', page).group(1)
    assert url.endswith("/blob/notebooks/chapters/softmax.ipynb")

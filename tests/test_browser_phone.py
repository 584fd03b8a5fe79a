"""Every page at phone width (390 px), each opened once: nothing scrolls the page sideways (long inline code
wraps, widgets and tables scroll inside their own box: code/booktools/static/attnbook-phone.css), and the
widgets' drawn and visible text (labels, SVG text, tooltips, aria labels) is Chinese (tests/figure_words.py)."""

from __future__ import annotations

import pytest

from conftest import chapter_pages
from figure_words import english_words, load_allowed, load_chapter_words

pytestmark = [pytest.mark.book, pytest.mark.browser]
PHONE = {"width": 390, "height": 844}

WIDGET_TEXT = """() => [...document.querySelectorAll('.attnbook-static-widget')].map(w => {
  const out = [], walker = document.createTreeWalker(w, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) { const t = walker.currentNode.textContent.trim(); if (t) out.push(t); }
  for (const e of w.querySelectorAll('[aria-label], [title]'))
    for (const a of ['aria-label', 'title']) if (e.getAttribute(a)) out.push(e.getAttribute(a));
  return [w.dataset.widget, out];
})"""


@pytest.fixture(scope="module")
def phone_pages(built_html, book_url, browser):
    """docname -> (document scroll width, viewport width, [(widget, [text, …]), …]) at 390 px."""
    context = browser.new_context(viewport=PHONE)
    seen = {}
    for path in chapter_pages(built_html):
        page = context.new_page()
        page.goto(f"{book_url}/{path.relative_to(built_html).as_posix()}", wait_until="load")
        page.wait_for_timeout(200)  # layout after the widgets' module scripts ran
        size = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        seen[path.relative_to(built_html).with_suffix("").as_posix()] = (*size, page.evaluate(WIDGET_TEXT))
        page.close()
    context.close()
    return seen


def test_no_page_scrolls_sideways_on_a_phone(phone_pages):
    assert len(phone_pages) >= 15
    wide = {d: w for d, (w, viewport, _) in phone_pages.items() if w > viewport}
    assert all(viewport == PHONE["width"] for _, viewport, _ in phone_pages.values())
    assert not wide, f"pages wider than {PHONE['width']} px: {wide}"


def test_widgets_show_chinese(phone_pages):
    allowed, found, widgets = load_allowed(), {}, 0
    for docname, (_, _, shown) in phone_pages.items():
        ok = {**allowed, **load_chapter_words().get(docname, {})}
        for widget, texts in shown:
            widgets += 1
            bad = sorted({w for t in texts for w in english_words(t, ok)})
            if bad:
                found[f"{docname} {widget}"] = bad
    assert widgets >= 11, "the book's pages show at least one of each of its eleven widgets"
    assert not found, "\n".join(f"{k}: {v}" for k, v in found.items())

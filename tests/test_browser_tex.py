"""No raw TeX where a reader looks: prose and link text of every built page, as the browser shows it."""

from __future__ import annotations

import re

import pytest

from conftest import chapter_pages, visit

pytestmark = [pytest.mark.book, pytest.mark.browser]

# A TeX command (\sqrt, \frac, \mathrm …), a dollar sign, or a braced sub- or superscript.
RAW_TEX = re.compile(r"\\[A-Za-z]+|\$|[_^]\{")

# Every text node of the page, hidden ones too (a collapsed dropdown is still read once opened), except code,
# program output shown as code, what MathJax has typeset (its mjx-container replaces the TeX), and the controls and
# tables an interactive widget draws for itself (.attnbook-static-widget: UI labels, not prose).
TEXT_NODES = """() => {
  const skip = 'script, style, pre, code, kbd, samp, textarea, svg, mjx-container, .highlight, .cell_input, '
             + '.attnbook-static-widget';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(skip) || !n.textContent.trim()) continue;
    out.push({text: n.textContent.trim(), link: !!el.closest('a')});
  }
  return out;
}"""


def raw_tex(texts: list[dict]) -> list[str]:
    """The texts that contain TeX source, marked when they are link text."""
    return [("link: " if t["link"] else "") + t["text"][:120] for t in texts if RAW_TEX.search(t["text"])]


def test_pattern_finds_tex_source_and_passes_prose():
    found = raw_tex([{"text": "为什么要除以 \\sqrt{d_k}", "link": True}, {"text": "权重 $p_i$", "link": False},
                     {"text": "W_{q}", "link": False}, {"text": "x^{2}", "link": False},
                     {"text": "除以 √d_k 后分数的标准差约为 1；d_model = 64", "link": False}])
    assert found == ["link: 为什么要除以 \\sqrt{d_k}", "权重 $p_i$", "W_{q}", "x^{2}"]


def test_no_page_shows_tex_source_in_prose_or_links(browser, book_url, built_html):
    report = {}
    for rel in [p.relative_to(built_html).as_posix() for p in chapter_pages(built_html)] + ["index.html"]:
        page, errors, _ = visit(browser, f"{book_url}/{rel}")
        found = raw_tex(page.evaluate(TEXT_NODES))
        page.close()
        if found:
            report[rel] = found
    assert not report, "raw TeX on the page:\n" + "\n".join(f"{rel}: {found}" for rel, found in report.items())


def test_collapsed_boxes_are_labelled_in_chinese(browser, book_url):
    page, errors, _ = visit(browser, f"{book_url}/chapters/gpt.html")   # solutions and answers are collapsed
    hints = page.evaluate("() => [...document.querySelectorAll('button.toggle-button')].map(b => b.dataset.toggleHint)")
    page.locator("button.toggle-button").first.click()                   # open one: its hint becomes 'hide'
    opened = page.locator("button.toggle-button").first.get_attribute("data-toggle-hint")
    page.close()
    assert len(hints) >= 5 and set(hints) == {"点击展开"} and opened == "点击收起" and errors == []

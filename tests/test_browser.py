"""The built book in a real browser (Debian chromium via Playwright), offline."""

from __future__ import annotations

import pytest
import torch

from conftest import chapter_pages, visit

pytestmark = [pytest.mark.book, pytest.mark.browser]


def _pages(built_html):
    pages = [p.relative_to(built_html).as_posix() for p in chapter_pages(built_html)]
    return pages + ["index.html", "search.html", "genindex.html"]


def test_every_page_loads_offline_without_console_errors(browser, book_url, built_html):
    report = {}
    for rel in _pages(built_html):
        page, errors, foreign = visit(browser, f"{book_url}/{rel}")
        images = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                               ".map(i => i.src)")
        raw_tex = page.evaluate("() => document.querySelectorAll('.math:not(:has(mjx-container))').length")
        typeset = page.evaluate("() => document.querySelectorAll('mjx-container').length")
        has_math = page.evaluate("() => document.querySelectorAll('.math').length") > 0
        page.close()
        problems = {k: v for k, v in dict(errors=errors, foreign_requests=foreign, broken_images=images,
                                          untypeset_math=raw_tex).items() if v}
        if has_math and not typeset:
            problems["typeset"] = "page has maths but MathJax produced nothing"
        if problems:
            report[rel] = problems
    assert report == {}


def test_temperature_slider_redraws_the_chart_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/softmax.html")
    widget = page.locator('[data-widget="SoftmaxTemperatureWidget"]').first
    widget.scroll_into_view_if_needed()
    logits = page.evaluate("""el => JSON.parse(el.nextElementSibling.nextElementSibling.textContent
                                .match(/staticModel\\((\\{.*?\\})\\)/)[1]).logits""",
                           widget.element_handle())

    def bars():
        return [float(v) for v in widget.locator("rect.bar").evaluate_all("rs => rs.map(r => r.dataset.p)")]

    def heights():
        return widget.locator("rect.bar").evaluate_all("rs => rs.map(r => +r.getAttribute('height'))")

    before, h_before = bars(), heights()
    slider = widget.locator('input[type="range"]')
    for log10_t in (-0.5, 0.8):  # T = 10^-0.5 (sharper), then 10^0.8 (flatter)
        slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", str(log10_t))
        T = 10 ** float(slider.input_value())  # the value the slider snapped to (step 0.01)
        assert T == pytest.approx(10 ** log10_t, rel=0.03)
        expected = torch.softmax(torch.tensor(logits, dtype=torch.float64) / T, dim=-1).tolist()
        assert bars() == pytest.approx(expected, rel=1e-6)  # the page's JS agrees with torch
        assert T == pytest.approx(float(widget.locator(".attnbook-readout").inner_text().split("=")[1].split()[0]),
                                  abs=0.006)
    assert bars() != before and heights() != h_before
    page.close()
    assert errors == [] and foreign == []

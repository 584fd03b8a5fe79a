"""The sinusoidal explorer on the built static page: the sliders redraw, and the numbers the page
computed with Math.sin / Math.cos equal attnbook.sinusoidal_encoding."""

from __future__ import annotations

import json

import pytest
import torch

import attnbook
from conftest import visit
from widget_page import static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_position_and_feature_sliders_redraw_the_encoding_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/positional_encoding.html")
    widget = page.locator('[data-widget="SinusoidalExplorerWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    n, d = state["max_len"], state["d_model"]
    pe = attnbook.sinusoidal_encoding(n, d, state["base"], dtype=torch.float64)  # (n, d)
    position, feature = widget.locator('input[type="range"]').nth(0), widget.locator('input[type="range"]').nth(1)

    def bars():
        return [float(v) for v in widget.locator("svg.vector rect.bar").evaluate_all("rs => rs.map(r => r.dataset.v)")]

    def panel(name):
        return json.loads(widget.locator(f"svg.{name}").get_attribute("data-values"))

    def drawn():
        return (widget.locator("svg.vector rect.bar").evaluate_all("rs => rs.map(r => r.getAttribute('height'))"),
                widget.locator("svg.wave polyline").get_attribute("points"),
                widget.locator("svg.dot circle").get_attribute("cx"))

    before = drawn()
    for p, j in [(0, 0), (17, 5), (n - 1, d - 1)]:
        for slider, v in ((position, p), (feature, j)):
            slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", str(v))
        assert int(widget.locator(".attnbook-readout.pos").inner_text().split("=")[1]) == p
        assert bars() == pytest.approx(pe[p].tolist(), abs=1e-9)               # PE(p), by the page's JS
        assert panel("vector") == pytest.approx(pe[p].tolist(), abs=1e-9)
        assert panel("wave") == pytest.approx(pe[:, j].tolist(), abs=1e-9)     # feature j over positions
        assert panel("dot") == pytest.approx((pe @ pe[p]).tolist(), abs=1e-9)  # PE(p)·PE(t)
        info = widget.locator(".attnbook-readout.info").inner_text()
        assert float(info.split("=")[-1]) == pytest.approx(float(pe[p, j]), abs=6e-5)  # shown to 4 decimals
        highlighted = widget.locator("svg.vector rect.bar").evaluate_all(
            "rs => rs.map((r, k) => r.classList.contains('alt') ? k : -1).filter(k => k >= 0)")
        assert highlighted == [j]
    assert drawn() != before
    page.close()
    assert errors == [] and foreign == []

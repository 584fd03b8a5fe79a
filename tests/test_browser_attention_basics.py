"""The kernel-regression widget on the built static page: dragging the width and the query redraws the
weights and the curve, and every number the page computed equals the Python implementation."""

from __future__ import annotations

import json

import pytest
import torch

import attnbook
from conftest import visit
from widget_page import drag, set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_width_and_query_sliders_redraw_weights_and_estimate_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/attention_basics.html")
    widget = page.locator('[data-widget="KernelRegressionWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    assert len(state["positions"]) == 8 and (state["x_min"], state["x_max"]) == (0.0, 80.0)
    py = attnbook.KernelRegressionWidget(state["positions"], state["values"], width=state["width"],
                                         query=state["query"], x_range=(state["x_min"], state["x_max"]),
                                         w_range=(state["w_min"], state["w_max"]))
    info, curve = widget.locator(".attnbook-readout.info"), widget.locator("svg.data polyline.curve")

    def drawn():
        return (curve.get_attribute("points"),
                widget.locator("svg.weights rect.bar").evaluate_all("rs => rs.map(r => r.getAttribute('height'))"))

    def check():
        """The page's weights, estimate and curve against the Python widget at the page's (w, q)."""
        py.width, py.query = float(info.get_attribute("data-width")), float(info.get_attribute("data-query"))
        weights = widget.locator("svg.weights rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.w)")
        assert weights == pytest.approx(py.weights().tolist(), abs=1e-6)
        assert float(info.get_attribute("data-estimate")) == pytest.approx(py.estimate(), abs=1e-6)
        xs = json.loads(curve.get_attribute("data-xs"))
        assert xs == pytest.approx(torch.linspace(0, 80, 161, dtype=torch.float64).tolist(), abs=1e-9)
        assert json.loads(curve.get_attribute("data-values")) == pytest.approx(py.estimates(xs)[0].tolist(), abs=1e-6)
        return weights

    before = drawn()
    check()
    drag(page, widget.locator("input.width"), 0.15)              # a real mouse drag: narrower kernel
    assert float(info.get_attribute("data-width")) < state["width"]
    assert drawn()[0] != before[0] and drawn()[1] != before[1]   # curve and weight bars both redrawn
    check()
    drag(page, widget.locator("input.query"), 0.8)
    assert float(info.get_attribute("data-query")) > state["query"]
    check()

    for log10_w, q in [(-0.5, 25.0), (0.4, 61.0), (1.8, 5.0)]:
        set_slider(widget.locator("input.width"), log10_w)
        set_slider(widget.locator("input.query"), q)
        check()
    # The two limits, on the page: narrowest -> the nearest station's reading; widest -> the mean.
    set_slider(widget.locator("input.query"), 25.0)
    set_slider(widget.locator("input.width"), -10)                 # clamps to w_min
    w = check()
    assert max(w) == pytest.approx(1.0, abs=1e-9)
    assert float(info.get_attribute("data-estimate")) == pytest.approx(state["values"][3], abs=1e-9)
    set_slider(widget.locator("input.width"), 10)                  # clamps to w_max
    w = check()
    mean = sum(state["values"]) / len(state["values"])
    assert float(info.get_attribute("data-estimate")) == pytest.approx(mean, abs=0.05)
    assert max(w) - min(w) < 0.01
    page.close()
    assert errors == [] and foreign == []

"""The RoPE-scaling widget on the built page of 注意力的新形态: a drag of s and a click on each method redraw it,
and the page's frequencies, attention factor and score curve equal attnbook.rope_scaling's (to 1e-6), with no
console errors and no request to another host."""

from __future__ import annotations

import json

import pytest

import attnbook
from conftest import visit
from test_rope_scaling_widget import METHODS, compare
from widget_page import drag, set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_rope_scaling_widget_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/recent_attention.html")
    widget = page.locator('[data-widget="RopeScalingWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    # the head of the chapter's train-short-test-long experiment (位置编码's model: d_k = 32 / 4 heads, L = 16)
    assert (state["dim"], state["base"], state["train_len"]) == (8, 10000.0, 16)
    py = attnbook.RopeScalingWidget(state["dim"], state["base"], state["train_len"], method=state["method"],
                                    factor=state["factor"], factor_max=state["factor_max"])
    info = widget.locator(".attnbook-readout.info")
    drawn = [compare(widget, py)]
    drag(page, widget.locator("input.factor"), 0.9)                       # a real mouse drag of s
    drawn.append(compare(widget, py))
    assert float(info.get_attribute("data-factor")) > state["factor"]
    for method in METHODS:                                                 # each method at two values of s
        widget.locator(f"label.method-{method}").click()
        for s in (2.0, 6.5):
            set_slider(widget.locator("input.factor"), s)
            drawn.append(compare(widget, py))
            assert (drawn[-1]["method"], drawn[-1]["factor"]) == (method, s)
    assert len({d["points"] for d in drawn}) == len(drawn)                 # every move redrew the curve
    set_slider(widget.locator("input.factor"), 4)
    assert json.loads(info.get_attribute("data-unseen")) == []            # YaRN at s = 4: no unseen angle
    page.close()
    assert errors == [] and foreign == []

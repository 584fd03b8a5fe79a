"""The RoPE widget on the built static page: the sliders and buttons redraw the rotated q and k, the
page's rotations and scores equal attnbook.apply_rotary, and shifting m and n together keeps the score."""

from __future__ import annotations

import json

import pytest

import attnbook
from conftest import visit
from widget_page import drag, set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_rope_sliders_and_shift_buttons_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/positional_encoding.html")
    widget = page.locator('[data-widget="RotaryWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    py = attnbook.RotaryWidget(state["q"], state["k"], m=state["m"], n=state["n"], pair=state["pair"],
                               max_pos=state["max_pos"], base=state["base"])
    info = widget.locator(".attnbook-readout.info")

    def arrows():
        return widget.locator("svg.plane line").evaluate_all("ls => ls.map(l => [l.getAttribute('x2'), l.getAttribute('y2')])")

    def check():
        """The page's m, n, pair; its rotated vectors and scores against the package (apply_rotary)."""
        py.m, py.n, py.pair = (int(info.get_attribute(f"data-{a}")) for a in ("m", "n", "pair"))
        rq, rk = py.rotated()
        assert json.loads(info.get_attribute("data-rq")) == pytest.approx(rq.tolist(), abs=1e-9)
        assert json.loads(info.get_attribute("data-rk")) == pytest.approx(rk.tolist(), abs=1e-9)
        assert float(info.get_attribute("data-score")) == pytest.approx(py.score(), abs=1e-6)
        assert float(info.get_attribute("data-pair-score")) == pytest.approx(py.pair_score(), abs=1e-6)
        return float(info.get_attribute("data-score"))

    curve = json.loads(widget.locator("svg.offsets polyline.curve").get_attribute("data-values"))
    assert curve == pytest.approx(py.offset_scores().tolist(), abs=1e-6)   # score for every n - m
    before = arrows()
    s0 = check()
    drag(page, widget.locator("input.n"), 0.5)                   # a real mouse drag of the key position
    assert int(info.get_attribute("data-n")) > state["n"] and arrows() != before
    check()
    set_slider(widget.locator("input.pair"), 3)
    set_slider(widget.locator("input.n"), 20)
    set_slider(widget.locator("input.m"), 5)
    s1, drawn = check(), arrows()
    for _ in range(4):                                             # shift both: the arrows turn, the score stays
        widget.locator("button.shift-up").click()
    assert (int(info.get_attribute("data-m")), int(info.get_attribute("data-n"))) == (9, 24)
    assert arrows() != drawn and check() == pytest.approx(s1, abs=1e-9)
    widget.locator("button.shift-down").click()
    assert check() == pytest.approx(s1, abs=1e-9)
    set_slider(widget.locator("input.n"), 21)                      # move the key only: the score changes
    assert abs(check() - s1) > 1e-3
    assert s0 != s1
    page.close()
    assert errors == [] and foreign == []

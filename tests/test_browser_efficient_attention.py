"""The online-softmax and tile-map widgets on the built static page: the sliders redraw, and the page's
running max, normaliser, outputs, weights and tile counts equal the Python implementation."""

from __future__ import annotations

import math

import pytest
import torch

import attnbook
from conftest import visit
from widget_page import drag, set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]
PAGE = "chapters/efficient_attention.html"


def test_online_softmax_steps_end_at_the_full_softmax_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/{PAGE}")
    widget = page.locator('[data-widget="OnlineSoftmaxWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    s, v = (torch.tensor(state[key], dtype=torch.float64) for key in ("scores", "values"))
    py = attnbook.OnlineSoftmaxWidget(s, v, block_size=state["block_size"], step=state["step"])
    info = widget.locator(".attnbook-readout.info")
    assert float(info.get_attribute("data-full")) == pytest.approx(float(torch.softmax(s, -1) @ v), abs=1e-12)

    def drawn():
        return (widget.locator("svg.scores rect").evaluate_all("rs => rs.map(r => r.getAttribute('class'))"),
                widget.locator("svg.weights rect.bar").evaluate_all("rs => rs.map(r => r.getAttribute('height'))"))

    def check():
        """The page's step state, weights and table rows against the Python widget (package functions)."""
        py.block_size, py.step = int(info.get_attribute("data-block")), int(info.get_attribute("data-step"))
        r = py.running()
        for key, attr in (("m", "data-m"), ("l", "data-l"), ("o_tilde", "data-ot")):
            assert float(info.get_attribute(attr)) == pytest.approx(r[key], abs=1e-6)
        if py.step:
            assert float(info.get_attribute("data-o")) == pytest.approx(r["o"], abs=1e-6)
        weights = widget.locator("svg.weights rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.p)")
        assert weights == pytest.approx(py.weights().tolist(), abs=1e-6)
        rows = widget.locator("table.steps tbody tr").evaluate_all("rs => rs.map(r => [+r.dataset.m, +r.dataset.l, +r.dataset.o])")
        assert len(rows) == py.step
        step = py.step
        for t, row in enumerate(rows, 1):
            py.step = t
            r = py.running()
            assert row == pytest.approx([r["m"], r["l"], r["o"]], abs=1e-6)
        py.step = step

    before = drawn()
    check()
    drag(page, widget.locator("input.step"), 1.0)                  # a real drag to the last block
    assert drawn() != before
    check()
    assert py.step == py.n_blocks()
    assert float(info.get_attribute("data-o")) == pytest.approx(float(info.get_attribute("data-full")), abs=1e-12)
    for b, t in [(1, 3), (5, 2), (len(s), 1), (3, 0), (4, 6)]:
        set_slider(widget.locator("input.block"), b)
        set_slider(widget.locator("input.step"), t)
        check()
        if t == math.ceil(len(s) / b):                              # every block read: the full softmax
            assert widget.locator("svg.weights rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.p)") == \
                pytest.approx(torch.softmax(s, -1).tolist(), abs=1e-9)
    page.close()
    assert errors == [] and foreign == []


def test_tile_map_counts_follow_the_formula_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/{PAGE}")
    widget = page.locator('[data-widget="TileMapWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    py = attnbook.TileMapWidget(state["seq_len"], state["block_size"], state["causal"], state["t_step"],
                                state["t_max"], state["block_sizes"])
    info = widget.locator(".attnbook-readout.info")

    def tiles():
        return widget.locator("rect.tile").evaluate_all("rs => rs.map(r => +r.dataset.kind)")

    def check(T, b, causal):
        py.seq_len, py.block_size, py.causal = T, b, causal
        assert tiles() == py.kinds().flatten().tolist()             # every tile, row by row
        c, nb = py.counts(), math.ceil(T / b)
        shown = {k: int(info.get_attribute(f"data-{a}")) for k, a in (
            ("n_blocks", "n-blocks"), ("computed", "computed"), ("masked", "masked"), ("skipped", "skipped"))}
        assert shown == c
        assert int(info.get_attribute("data-formula")) == (nb * (nb + 1) // 2 if causal else nb * nb) == c["computed"]
        mem = py.score_bytes()
        assert (int(info.get_attribute("data-full-bytes")), int(info.get_attribute("data-tiled-bytes"))) == \
            (mem["full"], mem["tiled"])

    check(state["seq_len"], state["block_size"], state["causal"])
    before = tiles()
    drag(page, widget.locator("input.seq-len"), 0.0)               # a real drag: the shortest T
    T = int(widget.locator("input.seq-len").input_value())
    assert T == state["t_step"] and tiles() != before
    check(T, state["block_size"], state["causal"])
    for T, b_index, causal in [(4096, 0, True), (768, 3, True), (2048, 1, False), (3840, 2, True)]:
        set_slider(widget.locator("input.seq-len"), T)
        set_slider(widget.locator("input.block"), b_index)
        if widget.locator("input.causal").is_checked() != causal:
            widget.locator("input.causal").click()
        check(T, state["block_sizes"][b_index], causal)
    page.close()
    assert errors == [] and foreign == []

"""The d_k widget on the built static page: the slider redraws the bars without a kernel."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import visit
from widget_page import static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def _softmax(s, scale=1.0):
    return torch.softmax(torch.tensor(s, dtype=torch.float64) * scale, dim=-1)


def _entropy(p):
    return float(-(p * p.clamp_min(1e-300).log()).sum())


def test_dk_slider_redraws_both_softmaxes_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/scaled_attention.html")
    widget = page.locator('[data-widget="DkScalingWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    dks, scores = state["dks"], state["scores"]

    def bars(kind):
        return [float(v) for v in widget.locator(f"rect.bar.{kind}").evaluate_all("rs => rs.map(r => r.dataset.p)")]

    def heights():
        return widget.locator("rect.bar").evaluate_all("rs => rs.map(r => +r.getAttribute('height'))")

    before, h_before = bars("raw") + bars("scaled"), heights()
    slider = widget.locator('input[type="range"]')
    for d in (1, 1024, 16):
        slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", str(dks.index(d)))
        shown = int(widget.locator(".attnbook-readout.dk").inner_text().split("=")[1])
        assert shown == d
        s = scores[dks.index(d)]
        raw, scaled = _softmax(s), _softmax(s, 1 / math.sqrt(d))
        assert bars("raw") == pytest.approx(raw.tolist(), rel=1e-6, abs=1e-12)      # the page's JS agrees
        assert bars("scaled") == pytest.approx(scaled.tolist(), rel=1e-6, abs=1e-12)  # with torch
        stats = widget.locator(".attnbook-readout.stats")
        assert float(stats.get_attribute("data-h-raw")) == pytest.approx(_entropy(raw), rel=1e-6, abs=1e-9)
        assert float(stats.get_attribute("data-h-scaled")) == pytest.approx(_entropy(scaled), rel=1e-6)
        if d == 1024:  # unscaled: one key takes (almost) everything; scaled: still spread out
            assert max(bars("raw")) > 0.99 and max(bars("scaled")) < 0.9
    assert bars("raw") + bars("scaled") != before and heights() != h_before
    page.close()
    assert errors == [] and foreign == []

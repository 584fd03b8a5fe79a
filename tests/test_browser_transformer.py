"""The date model's cross-attention widget on the built static page: choosing an input, a layer and a head and
dragging the output position redraws the map, the outlined row and the shaded source characters; every number
drawn is the weight Python shipped (1e-6), rows sum to 1, and the question is scored as Python scores it."""

from __future__ import annotations

import re

import pytest
import torch

import attnbook
from attnbook.widgets.cross_attention import SCALE
from conftest import visit
from widget_page import drag, set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_cross_attention_widget_redraws_without_a_kernel(browser, book_url, built_html):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/transformer.html")
    widget = page.locator('[data-widget="CrossAttentionWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    L, H, n = state["num_layers"], state["num_heads"], len(state["source_tokens"])
    assert (L, H, n) == (2, 4, 6)
    maps = [torch.tensor(w, dtype=torch.float64) / SCALE for w in state["weights"]]
    question = (state["question"], state["question_rows"], state["question_spans"], state["question_threshold"])
    py = attnbook.CrossAttentionWidget(state["source_tokens"], state["target_tokens"], maps, question=question)
    info = widget.locator(".attnbook-readout.info")

    def check():
        """The heatmap, the outlined row and the shaded source strip against the Python widget at the page's choice."""
        py.example, py.layer, py.head, py.step = (int(info.get_attribute(f"data-{k}"))
                                                   for k in ("example", "layer", "head", "step"))
        src, tgt = py.source_tokens[py.example], py.target_tokens[py.example]
        cells = widget.locator("rect.cell").evaluate_all("rs => rs.map(r => [+r.dataset.q, +r.dataset.k, +r.dataset.w])")
        assert len(cells) == len(tgt) * len(src)
        drawn = torch.zeros(len(tgt), len(src), dtype=torch.float64)
        for q, k, w in cells:
            drawn[q, k] = w
        torch.testing.assert_close(drawn, py.current(), rtol=0, atol=1e-6)          # Python's numbers, drawn
        torch.testing.assert_close(drawn.sum(-1), torch.ones(len(tgt), dtype=torch.float64), rtol=0,
                                   atol=len(src) * 0.5 / SCALE + 1e-12)             # softmax rows (rounded to 1e-6)
        strip = widget.locator(".source-strip span").evaluate_all("ss => ss.map(s => [s.textContent, +s.dataset.w])")
        assert [c for c, _ in strip] == src
        torch.testing.assert_close(torch.tensor([w for _, w in strip], dtype=torch.float64), py.current_row(),
                                   rtol=0, atol=1e-6)
        assert int(info.get_attribute("data-peak")) == int(py.current_row().argmax())
        box = widget.locator("rect.current")
        cell = float(widget.locator("rect.cell").first.get_attribute("height"))
        top = float(widget.locator("rect.cell").first.get_attribute("y"))
        assert float(box.get_attribute("y")) == pytest.approx(top + py.step * cell)   # the outlined row is the step
        labels = widget.locator("svg text").evaluate_all("ts => ts.map(t => t.textContent)")
        assert all(tok in labels for tok in src + tgt)                                # real tokens on both axes
        return cells, strip

    before = check()
    drag(page, widget.locator("input.step"), 0.55)                                   # a real mouse drag
    assert int(info.get_attribute("data-step")) > state["step"]
    after = check()
    assert after[1] != before[1] and info.get_attribute("data-peak") is not None      # the strip was re-shaded
    set_slider(widget.locator("input.layer"), L - 1)
    set_slider(widget.locator("input.head"), H - 1)
    other = check()
    assert other[0] != after[0]                                                      # another head, another map
    for e in range(n):
        widget.locator("select.example").select_option(str(e))
        set_slider(widget.locator("input.step"), 5)                                  # the month's first digit
        check()
    # Rows are the model's greedy output; the inputs are from the chapter's test split, none in its training split.
    task = attnbook.DateTask()
    test = {x.source for x in task.sample(1_500, "test", seed=attnbook.seed(0))}
    train = {x.source for x in task.sample(30_000, "train", seed=attnbook.seed(0))}
    sources = ["".join(s) for s in state["source_tokens"]]
    assert set(sources) <= test and not set(sources) & train
    assert all(t[-1] == "<eos>" and len(t) <= 11 for t in state["target_tokens"])

    # The question: the page's score of a head is Python's, for the best and the worst head.
    scores = py.question_scores()
    assert float(scores.max()) >= state["question_threshold"]                       # the question has an answer
    for k in (int(scores.argmax()), int(scores.argmin())):
        layer, head = divmod(k, H)
        set_slider(widget.locator("input.layer"), layer)
        set_slider(widget.locator("input.head"), head)
        widget.locator(".question button").click()
        result = widget.locator(".question .result")
        py.layer, py.head = layer, head
        score, ok = py.check_answer()
        assert float(result.get_attribute("data-score")) == pytest.approx(score, abs=1e-12)
        assert result.get_attribute("data-ok") == str(ok).lower() and result.inner_text().startswith("✓" if ok else "✗")
    page.close()
    assert errors == [] and foreign == []

    # A light page: the widget's block (its state, CSS and JS) is under 60 KB.
    html = (built_html / "chapters" / "transformer.html").read_text(encoding="utf-8")
    block = re.search(r'<div id="attnbook-widget-\d+" class="attnbook-static-widget" '
                      r'data-widget="CrossAttentionWidget"[^>]*>.*?</script>', html, re.S).group(0)
    assert len(block.encode()) < 60_000

"""The sampling widget on the built GPT page, with the trained model's stored logits and no kernel: dragging
temperature, top-k and top-p redraws the bars and the drawn token, and every bar is the probability
attnbook.sampling gives for the same logits and controls."""

from __future__ import annotations

import pytest
import torch

from attnbook import SamplingWidget
from attnbook.sampling import sampling_probs
from conftest import visit
from widget_page import set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_sampling_widget_on_the_built_page_matches_attnbook(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/gpt.html")
    widget = page.locator('[data-widget="SamplingWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    n_prompts, n = len(state["prompts"]), len(state["logits"][0])
    assert n_prompts >= 2 and n >= 10
    python = SamplingWidget(state["prompts"], state["tokens"], torch.tensor(state["logits"]), state["uniforms"])

    bars, drawn = [], set()
    for i, log10_t, k, p in ((0, 0.0, 0, 1.0), (0, -0.7, 0, 1.0), (0, 0.5, 0, 1.0), (0, 0.0, 3, 1.0),
                             (0, 0.0, 0, 0.5), (1, 0.3, 8, 0.9), (1, -0.3, 0, 1.0), (n_prompts - 1, 0.6, 0, 0.95)):
        widget.locator("select").select_option(str(i))
        T = 10 ** set_slider(widget.locator("input.temperature"), log10_t)
        k, p = int(set_slider(widget.locator("input.top_k"), k)), set_slider(widget.locator("input.top_p"), p)
        js = torch.tensor([float(v) for v in widget.locator("rect.bar").evaluate_all("rs => rs.map(r => r.dataset.p)")],
                          dtype=torch.float64)
        z = torch.tensor(state["logits"][i], dtype=torch.float64)
        expected = sampling_probs(z, T, k or None, None if p >= 1 else p)
        torch.testing.assert_close(js, expected, rtol=0, atol=1e-6)
        python.set_controls(T, k, p, prompt_index=i)
        shown = widget.locator(".drawn").get_attribute("data-drawn")
        assert shown == python.drawn()
        bars.append(js)
        drawn.add((i, shown))
    assert not torch.allclose(bars[0], bars[1]) and not torch.allclose(bars[0], bars[3])   # dragging redraws
    assert len({token for _, token in drawn}) > 1
    page.close()
    assert errors == [] and foreign == []

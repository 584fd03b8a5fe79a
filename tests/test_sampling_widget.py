"""The sampling widget: Python side against attnbook.sampling, and its static page in chromium against Python."""

from __future__ import annotations

import json
import re

import pytest
import torch

import attnbook
from attnbook.sampling import sampling_probs
from widget_page import set_slider

PROMPTS = ["中国", "新华社"]
TOKENS = [list("的人共政经济发展和国家"), list("北京记者电讯社报道消息")]
LOGITS = torch.tensor([[3.0, 2.5, 2.5, 1.0, 0.7, 0.2, 0.0, -0.5, -1.0, -1.2, -2.0],
                       [4.0, 1.0, 0.9, 0.5, 0.3, 0.2, 0.1, -0.3, -0.4, -1.0, -3.0]], dtype=torch.float64)
UNIFORMS = [0.62, 0.35]


def widget(**kw):
    return attnbook.SamplingWidget(PROMPTS, TOKENS, LOGITS, UNIFORMS, **kw)


@pytest.mark.parametrize("T, k, p", [(1.0, 0, 1.0), (0.5, 0, 1.0), (1.0, 2, 1.0), (1.3, 0, 0.5), (0.8, 5, 0.9)])
def test_probabilities_are_attnbooks_sampling_probs(T, k, p):
    w = widget()
    for i in range(2):
        w.set_controls(T, k, p, prompt_index=i)
        ref = sampling_probs(LOGITS[i], T, k or None, None if p >= 1 else p)
        torch.testing.assert_close(w.probabilities(), ref, rtol=0, atol=0)
        cdf = ref.cumsum(0)
        assert w.drawn() == TOKENS[i][int((cdf <= UNIFORMS[i]).sum())]


def test_tied_candidates_stay_together_and_the_draw_moves():
    w = widget()
    w.set_controls(1.0, 2, 1.0)                            # logits 2.5 tie for second place: three kept
    assert int((w.probabilities() > 0).sum()) == 3
    draws = set()
    for T, k, p in ((0.2, 0, 1.0), (1.0, 0, 1.0), (3.0, 0, 1.0), (1.0, 1, 1.0)):
        w.set_controls(T, k, p)
        draws.add(w.drawn())
    assert len(draws) > 1                               # dragging changes the drawn token


@pytest.mark.parametrize("kwargs, words", [
    (dict(temperature=0.0), "temperature > 0"),
    (dict(top_k=12), "0 <= top_k <= 11"),
    (dict(top_p=0.0), "0 < top_p <= 1"),
    (dict(top_k=2.5), "an integer 0 <= top_k <= 11 .* got 1.0, 2.5, 1.0"),      # not silently 2
    (dict(top_k=True), "got 1.0, True, 1.0"),
    (dict(temperature="1"), "got '1', 0, 1.0"),
    (dict(top_p=float("nan")), "0 < top_p <= 1"),
])
def test_bad_controls_raise_value_errors(kwargs, words):
    with pytest.raises(ValueError, match=words):
        widget(**kwargs)
    with pytest.raises(ValueError, match="one uniform per prompt"):
        attnbook.SamplingWidget(PROMPTS, TOKENS, LOGITS, [0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        attnbook.SamplingWidget(PROMPTS, TOKENS, LOGITS, [0.5, 1.0])


@pytest.mark.parametrize("index", [2, -1, 1.5, True])
def test_a_prompt_index_outside_the_prompts_is_named(index):
    w = widget()
    with pytest.raises(ValueError, match=rf"^prompt_index must be an integer in \[0, 2\), got {index!r}"):
        w.set_controls(1.0, 0, 1.0, prompt_index=index)
    assert w.prompt_index == 0


@pytest.mark.browser
def test_static_page_matches_python_and_redraws(browser, tmp_path):
    w = widget()
    page_file = tmp_path / "widget.html"
    page_file.write_text(f"<!doctype html><meta charset='utf-8'><body>{w.static_html()}</body>", encoding="utf-8")
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", w.static_html()).group(1))
    assert state["logits"] == LOGITS.tolist()
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(page_file.as_uri())
    root = page.locator('[data-widget="SamplingWidget"]')

    drawn = set()
    for i, log10_t, k, p in ((0, 0.0, 0, 1.0), (0, -0.5, 0, 1.0), (0, 0.0, 2, 1.0), (1, 0.3, 0, 0.6),
                             (1, -0.2, 5, 0.9), (0, 0.6, 0, 0.3)):
        root.locator("select").select_option(str(i))
        T = 10 ** set_slider(root.locator("input.temperature"), log10_t)
        k = int(set_slider(root.locator("input.top_k"), k))
        p = set_slider(root.locator("input.top_p"), p)
        w.set_controls(T, k, p, prompt_index=i)
        js = [float(v) for v in root.locator("rect.bar").evaluate_all("rs => rs.map(r => r.dataset.p)")]
        assert js == pytest.approx(w.probabilities().tolist(), rel=1e-9, abs=1e-15)
        shown = root.locator(".drawn").get_attribute("data-drawn")
        assert shown == w.drawn()
        drawn.add(shown)
    page.close()
    assert errors == [] and len(drawn) > 1

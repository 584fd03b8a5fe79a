"""The online-softmax widget: the running max, normaliser and output after each block against their
closed forms and torch, the static fallback and a live kernel (browser: test_browser_efficient_attention.py)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

import attnbook
from kernel_comm import LiveWidget

G = torch.Generator().manual_seed(11)
S = 3 * torch.randn(13, dtype=torch.float64, generator=G)   # 13 keys: blocks of 4 leave a ragged last one
V = torch.randn(13, dtype=torch.float64, generator=G)


@pytest.mark.parametrize("block_size", [1, 3, 4, 13])
def test_every_step_equals_softmax_over_the_keys_read_so_far(block_size):
    w = attnbook.OnlineSoftmaxWidget(S, V, block_size=block_size)
    n_blocks = math.ceil(13 / block_size)
    assert w.n_blocks() == n_blocks
    previous = None
    for step in range(n_blocks + 1):
        w.step = step
        r, n = w.running(), min(step * block_size, 13)
        if n == 0:
            assert (r["m"], r["l"], r["o_tilde"]) == (-math.inf, 0.0, 0.0) and math.isnan(r["o"])
            assert w.weights().abs().sum() == 0
            continue
        s, v = S[:n], V[:n]
        m = float(s.max())
        assert r["m"] == m                                                      # running max = prefix max
        assert r["l"] == pytest.approx(float(torch.exp(s - m).sum()), rel=1e-12)
        assert r["o_tilde"] == pytest.approx(float(torch.exp(s - m) @ v), rel=1e-12, abs=1e-12)
        assert r["o"] == pytest.approx(float(torch.softmax(s, -1) @ v), rel=1e-12, abs=1e-12)
        torch.testing.assert_close(w.weights()[:n], torch.softmax(s, -1))
        if previous is not None:                                                # the rescaling recurrence
            blk = S[(step - 1) * block_size:n]
            c = math.exp(previous["m"] - r["m"])
            assert r["l"] == pytest.approx(previous["l"] * c + float(torch.exp(blk - r["m"]).sum()), rel=1e-12)
            assert r["o_tilde"] == pytest.approx(previous["o_tilde"] * c + float(torch.exp(blk - r["m"]) @ V[
                (step - 1) * block_size:n]), rel=1e-12, abs=1e-12)
        previous = r
    # after the last block: the full softmax, and torch's attention with q = 1, k_j = s_j, scale 1
    torch.testing.assert_close(w.weights(), torch.softmax(S, -1))
    sdpa = F.scaled_dot_product_attention(torch.ones(1, 1, dtype=torch.float64), S.view(13, 1), V.view(13, 1),
                                          scale=1.0)
    assert w.running()["o"] == pytest.approx(float(sdpa), rel=1e-12, abs=1e-14)


def test_a_new_maximum_rescales_the_old_sums_down():
    s = torch.tensor([0.0, 1.0, 5.0, 2.0], dtype=torch.float64)
    w = attnbook.OnlineSoftmaxWidget(s, [1.0, 2.0, 3.0, 4.0], block_size=2, step=1)
    before = w.running()
    w.step = 2
    after = w.running()
    assert after["m"] == 5.0 and after["l"] == pytest.approx(before["l"] * math.exp(1.0 - 5.0) + 1 + math.exp(-3.0))


@pytest.mark.parametrize("kwargs, message", [
    (dict(scores=[], values=[]), "non-empty"),
    (dict(scores=[1.0, math.inf], values=[1.0, 2.0]), "finite"),
    (dict(scores=[1.0, 2.0], values=[1.0]), "2 scores for 1 values"),
    (dict(scores=[1.0, 2.0], values=[1.0, 2.0], block_size=3), r"block_size must be an integer in \[1, 2\]"),
    (dict(scores=[1.0, 2.0, 3.0], values=[1.0, 2.0, 3.0], block_size=2, step=3), r"step must be an integer in \[0, 2\]"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.OnlineSoftmaxWidget(**kwargs)


def test_static_fallback_carries_the_row_and_the_js_runs_the_recurrence():
    w = attnbook.OnlineSoftmaxWidget(S, V, block_size=4, step=2)
    page = w._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state == {"block_size": 4, "scores": S.tolist(), "step": 2, "values": V.tolist()}
    assert "function onlineSteps(" in page and "export default" not in page
    assert not re.search(r"(src|href)=\"?https?://", page)
    assert len(page.encode()) < 60_000


def test_live_kernel_sees_the_sliders_and_moves_them():
    setup = f"import attnbook, json\nw = attnbook.OnlineSoftmaxWidget({S.tolist()}, {V.tolist()}, block_size=4)"
    with LiveWidget(setup) as live:
        assert live.send({"block_size": 3, "step": 5}) == ["block_size", "step"]
        got = json.loads(live.run("print(json.dumps([w.block_size, w.step, w.running()['o']]))"))
        assert got[:2] == [3, 5] and got[2] == pytest.approx(float(torch.softmax(S, -1) @ V), rel=1e-12)
        assert {"step": 1} in live.python_updates("w.step = 1")

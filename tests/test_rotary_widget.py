"""The RoPE widget: rotations and scores against complex multiplication, the score's dependence on n - m
only, the static fallback and a live kernel (the browser test is in test_browser_rope.py)."""

from __future__ import annotations

import cmath
import json
import re

import pytest
import torch

import attnbook
from kernel_comm import LiveWidget

D = 12
G = torch.Generator().manual_seed(5)
Q, K = torch.randn(D, dtype=torch.float64, generator=G), torch.randn(D, dtype=torch.float64, generator=G)


def complex_pairs(x, p, base=10000.0):
    """Pair i as the complex number x_2i + i x_2i+1, times e^{i p theta_i}, theta_i = base^(-2i/D)."""
    return [complex(x[2 * i], x[2 * i + 1]) * cmath.exp(1j * p * base ** (-2 * i / len(x)))
            for i in range(len(x) // 2)]


def complex_score(m, n, base=10000.0):
    """<a, b> = Re(conj(a) b) summed over the pairs."""
    return sum((a.conjugate() * b).real for a, b in zip(complex_pairs(Q.tolist(), m, base),
                                                        complex_pairs(K.tolist(), n, base)))


@pytest.mark.parametrize("m, n, pair, base", [(3, 7, 0, 10000.0), (0, 0, 5, 10000.0), (40, 9, 2, 100.0)])
def test_rotation_and_score_equal_complex_multiplication(m, n, pair, base):
    w = attnbook.RotaryWidget(Q, K, m=m, n=n, pair=pair, base=base)
    rq, rk = w.rotated()
    zq, zk = complex_pairs(Q.tolist(), m, base), complex_pairs(K.tolist(), n, base)
    torch.testing.assert_close(rq, torch.tensor([c for z in zq for c in (z.real, z.imag)], dtype=torch.float64))
    torch.testing.assert_close(rk, torch.tensor([c for z in zk for c in (z.real, z.imag)], dtype=torch.float64))
    assert w.score() == pytest.approx(complex_score(m, n, base), rel=1e-12, abs=1e-12)
    assert w.pair_score() == pytest.approx((zq[pair].conjugate() * zk[pair]).real, rel=1e-12, abs=1e-12)


def test_score_depends_on_n_minus_m_only():
    w = attnbook.RotaryWidget(Q, K, m=3, n=7)
    before = w.score()
    for s in (1, 10, 56):                       # shift both: the score stays
        w.m, w.n = 3 + s, 7 + s
        assert w.score() == pytest.approx(before, abs=1e-12)
    w.m, w.n = 3, 8                             # move the key only: it changes
    assert abs(w.score() - before) > 1e-3
    offsets = w.offset_scores()                 # q at 0, k at r = -63 .. 63
    assert offsets.shape == (127,)
    for m, n in [(0, 0), (3, 7), (50, 10), (63, 0)]:
        w.m, w.n = m, n
        assert float(offsets[n - m + 63]) == pytest.approx(w.score(), abs=1e-12)
        assert float(offsets[n - m + 63]) == pytest.approx(complex_score(m, n), abs=1e-12)


@pytest.mark.parametrize("kwargs, message", [
    (dict(q=[1.0, 2.0, 3.0], k=[1.0, 2.0, 3.0]), "even number"),
    (dict(q=[1.0, 2.0], k=[1.0, 2.0, 3.0, 4.0]), "same size"),
    (dict(q=[1.0, float("nan")], k=[1.0, 2.0]), "finite"),
    (dict(q=[1.0, 2.0], k=[1.0, 2.0], m=64), r"m must be an integer in \[0, 63\]"),
    (dict(q=[1.0, 2.0], k=[1.0, 2.0], pair=1), r"pair must be an integer in \[0, 0\]"),
    (dict(q=[1.0, 2.0], k=[1.0, 2.0], max_pos=0), "max_pos must be an integer >= 1"),
    (dict(q=[1.0, 2.0], k=[1.0, 2.0], base=1.0), "base must be a finite number > 1"),
    (dict(q=[1.0, 2.0], k=[1.0, 2.0], base="1e4"), "base must be a finite number > 1, got '1e4'"),   # not a TypeError
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.RotaryWidget(**kwargs)


def test_static_fallback_carries_q_k_and_the_js_rotates_itself():
    w = attnbook.RotaryWidget(Q, K, m=2, n=5, pair=1, max_pos=20)
    page = w._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state["q"] == Q.tolist() and state["k"] == K.tolist()
    assert (state["m"], state["n"], state["pair"], state["max_pos"], state["base"]) == (2, 5, 1, 20, 10000.0)
    assert "function rotate(" in page and "Math.cos" in page and "export default" not in page
    assert not re.search(r"(src|href)=\"?https?://", page)
    assert len(page.encode()) < 60_000


def test_live_kernel_sees_the_sliders_and_moves_them():
    setup = f"import attnbook, json\nw = attnbook.RotaryWidget({Q.tolist()}, {K.tolist()}, m=3, n=7)"
    with LiveWidget(setup) as live:
        assert live.send({"m": 10, "n": 14}) == ["m", "n"]        # what the "+1" button sends, seven times
        got = json.loads(live.run("print(json.dumps([w.m, w.n, w.score()]))"))
        assert got[:2] == [10, 14] and got[2] == pytest.approx(complex_score(10, 14), abs=1e-12)
        assert got[2] == pytest.approx(complex_score(3, 7), abs=1e-12)   # shifted both: the same score
        assert {"pair": 4} in live.python_updates("w.pair = 4")

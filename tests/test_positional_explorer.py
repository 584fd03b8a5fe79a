"""The sinusoidal explorer widget: Python side and its static fallback (the browser test is separate)."""

import json
import math
import re

import pytest
import torch

import attnbook


def test_vector_and_dot_products_follow_the_formula():
    w = attnbook.SinusoidalExplorerWidget(max_len=40, d_model=10, position=7, dim=3)
    for p in (0, 7, 39):
        w.position = p
        expected = [math.sin(p / 10000 ** (2 * (j // 2) / 10)) if j % 2 == 0 else
                    math.cos(p / 10000 ** (2 * (j // 2) / 10)) for j in range(10)]
        torch.testing.assert_close(w.vector(), torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)
        # PE(p)·PE(t) = sum_i cos(w_i (t - p)) for even d_model
        t = torch.arange(40, dtype=torch.float64)
        freqs = torch.tensor([10000 ** (-2 * i / 10) for i in range(5)], dtype=torch.float64)
        closed = torch.cos((t - p)[:, None] * freqs).sum(-1)
        torch.testing.assert_close(w.dot_products(), closed, rtol=0, atol=1e-10)


def test_observe_sees_slider_changes():
    w = attnbook.SinusoidalExplorerWidget()
    seen = []
    w.observe(lambda change: seen.append(change["new"]), names="position")
    w.position = 3
    assert seen == [3]


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=1), "max_len must be an integer >= 2"),
    (dict(d_model=0), "d_model must be an integer >= 1"),
    (dict(max_len=8, position=8), r"^position must be an integer in \[0, 8\), got 8"),
    (dict(position=2.5), r"^position must be an integer in \[0, 64\), got 2.5"),        # not a TraitError
    (dict(d_model=4, dim=4), r"^dim must be an integer in \[0, 4\), got 4"),
    (dict(base=1.0), "base must be a finite number > 1"),
    (dict(base="1e4"), "base must be a finite number > 1, got '1e4'"),                   # not a TypeError
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.SinusoidalExplorerWidget(**kwargs)


def test_static_fallback_carries_the_state_and_the_js_computes_sin_cos_itself():
    w = attnbook.SinusoidalExplorerWidget(max_len=16, d_model=6, position=2, dim=5, base=100.0)
    page = w._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state == {"base": 100.0, "d_model": 6, "dim": 5, "max_len": 16, "position": 2}
    assert "Math.sin" in page and "Math.cos" in page and "export default" not in page
    assert not re.search(r"(src|href)=\"?https?://", page)

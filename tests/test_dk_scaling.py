"""The d_k widget's Python side: precomputed scores, weights, entropies, static state."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

import attnbook
from attnbook.widgets.dk_scaling import dk_grid, raw_scores


def test_grid_is_log_spaced_from_1_to_d_max():
    g = dk_grid(1024)
    assert g[0] == 1 and g[-1] == 1024 and g == sorted(set(g))
    assert {2 ** i for i in range(11)} <= set(g)
    ratios = [b / a for a, b in zip(g, g[1:]) if a >= 16]
    assert max(ratios) < 1.25  # about 2^(1/4) apart once rounding stops mattering


def test_scores_are_dot_products_of_nested_gaussian_vectors():
    dks = [1, 8, 1024]
    s = raw_scores(dks, n_keys=5, seed=3)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1024, generator=g, dtype=torch.float64)
    keys = torch.randn(5, 1024, generator=g, dtype=torch.float64)
    for row, d in zip(s, dks):
        torch.testing.assert_close(row, torch.einsum("nd,d->n", keys[:, :d], q[:d]))
    # for one fixed query, Var over keys of q·k is |q|^2 (about d_k): check it with many keys
    many = raw_scores([16, 1024], n_keys=4000, seed=0)
    q0 = torch.randn(1024, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for row, d in zip(many, (16, 1024)):
        assert float(row.var()) == pytest.approx(float(q0[:d].square().sum()), rel=0.1)


def test_weights_and_entropies_equal_torch_softmax():
    w = attnbook.DkScalingWidget(n_keys=6, d_k=64, seed=0)
    for d in (1, 64, 1024):
        w.d_k = d
        s = torch.tensor(w.scores[w.dks.index(d)], dtype=torch.float64)
        torch.testing.assert_close(w.weights(scaled=False), torch.softmax(s, -1))
        ref = torch.softmax(s / math.sqrt(d), -1)
        torch.testing.assert_close(w.weights(), ref)
        assert w.entropy() == pytest.approx(float(-(ref * ref.log()).sum()), rel=1e-12)
    # at d_k = 1024 the unscaled softmax has collapsed onto one key, the scaled one has not
    assert w.weights(scaled=False).max() > 0.99 and w.weights().max() < 0.9
    assert w.entropy(scaled=False) < 0.1 < w.entropy()


def test_observe_and_grid_validation():
    w = attnbook.DkScalingWidget()
    seen = []
    w.observe(lambda c: seen.append(c["new"]), names="d_k")
    w.d_k = 256
    assert seen == [256]
    with pytest.raises(Exception, match="not on the grid"):
        w.d_k = 100


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_keys=1), "n_keys must be an integer >= 2"),
    (dict(d_max=1), "d_max must be an integer >= 2"),
    (dict(d_k=100), "d_k=100 is not on the grid"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.DkScalingWidget(**kwargs)


def test_static_fallback_carries_the_precomputed_scores():
    w = attnbook.DkScalingWidget(n_keys=4, d_k=16, seed=1)
    page = w._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state["d_k"] == 16 and state["dks"] == w.dks and state["labels"] == ["k1", "k2", "k3", "k4"]
    torch.testing.assert_close(torch.tensor(state["scores"], dtype=torch.float64), raw_scores(w.dks, 4, 1), rtol=0, atol=0)
    assert "data-widget=\"DkScalingWidget\"" in page and "export default" not in page

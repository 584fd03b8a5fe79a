"""Sampling filters against Hugging Face transformers' logits warpers and against their definitions."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from attnbook.sampling import (apply_temperature, filter_logits, greedy_next, sample_next, sampling_probs,
                               top_k_filter, top_p_filter)


def random_logits(b=6, v=40, seed=0, scale=2.0):
    return scale * torch.randn(b, v, generator=torch.Generator().manual_seed(seed))


def hf(warper, logits):
    ids = torch.zeros(logits.size(0), 1, dtype=torch.long)       # warpers ignore the input ids
    return warper(ids, logits.clone())


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_temperature_matches_transformers(t):
    z = random_logits()
    torch.testing.assert_close(apply_temperature(z, t), hf(TemperatureLogitsWarper(t), z), rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 2, 7, 39, 40, 100])
def test_top_k_matches_transformers(k):
    z = random_logits(seed=k)
    torch.testing.assert_close(top_k_filter(z, k), hf(TopKLogitsWarper(k), z), rtol=0, atol=0)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.8, 0.95, 0.999])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_p_matches_transformers(p, seed):
    z = random_logits(b=16, seed=seed)
    torch.testing.assert_close(top_p_filter(z, p), hf(TopPLogitsWarper(p), z), rtol=0, atol=0)


@pytest.mark.parametrize("t, k, p", [(0.7, 10, 0.9), (1.5, 5, 0.6), (1.0, 40, 0.3), (0.5, 3, 0.99)])
def test_combination_matches_transformers_in_their_order(t, k, p):
    z = random_logits(b=16, seed=3)
    ref = hf(TopPLogitsWarper(p), hf(TopKLogitsWarper(k), hf(TemperatureLogitsWarper(t), z)))
    torch.testing.assert_close(filter_logits(z, t, k, p), ref, rtol=0, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.4, 0.7, 0.9, 0.99])
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(p):
    z = random_logits(b=32, v=25, seed=7).double()
    probs = torch.softmax(z, -1)
    kept = torch.isfinite(top_p_filter(z, p))
    for row in range(z.size(0)):
        pr, keep = probs[row].tolist(), kept[row].tolist()
        order = sorted(range(len(pr)), key=lambda i: -pr[i])
        m = next(j for j in range(1, len(pr) + 1) if sum(pr[i] for i in order[:j]) >= p)
        assert sorted(i for i, k in enumerate(keep) if k) == sorted(order[:m])    # no ties in random floats
        mass = sum(pr[i] for i in order[:m])
        assert mass >= p and mass - pr[order[m - 1]] < p                         # reaches p, and minimal


def test_ties_at_the_boundary_are_kept_together():
    z = torch.log(torch.tensor([[0.4, 0.2, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64))
    # 0.4 + 0.2 reaches 0.5, but which 0.2? All three, so the set does not depend on a sort's order.
    assert torch.isfinite(top_p_filter(z, 0.5)).tolist() == [[True] * 4, [True] * 4]
    assert torch.isfinite(top_p_filter(z, 0.4)).tolist() == [[True, False, False, False], [True] * 4]
    z = torch.tensor([[3.0, 2.0, 2.0, 1.0]])
    assert torch.isfinite(top_k_filter(z, 2)).tolist() == [[True, True, True, False]]
    torch.testing.assert_close(top_k_filter(z, 2), hf(TopKLogitsWarper(2), z))          # transformers agrees


def test_top_p_differs_from_transformers_only_by_the_ties_at_its_boundary():
    z = torch.log(torch.tensor([[0.4, 0.2, 0.2, 0.2]], dtype=torch.float64))
    theirs, ours = torch.isfinite(hf(TopPLogitsWarper(0.5), z))[0], torch.isfinite(top_p_filter(z, 0.5))[0]
    assert int(theirs.sum()) == 2 and bool(theirs[0]) and int(ours.sum()) == 4   # the minimal set vs every tie
    assert bool((theirs <= ours).all())                                         # theirs lies inside ours


def test_sampling_probs_are_the_kept_probabilities_renormalised():
    z = random_logits(b=8, v=30, seed=11).double()
    t, k, p = 0.8, 12, 0.7
    probs = sampling_probs(z, t, k, p)
    base = torch.softmax(z / t, -1)
    kept = torch.isfinite(filter_logits(z, t, k, p))
    ref = torch.where(kept, base, 0.0) / (base * kept).sum(-1, keepdim=True)
    torch.testing.assert_close(probs, ref, rtol=1e-12, atol=1e-15)
    assert (kept.sum(-1) <= k).all() and (kept.sum(-1) >= 1).all()


def test_temperature_zero_is_greedy():
    z = random_logits(seed=5)
    torch.testing.assert_close(sampling_probs(z, 0.0), torch.nn.functional.one_hot(z.argmax(-1), z.size(-1)).float())
    assert torch.equal(sample_next(z, 0.0), greedy_next(z)) and torch.equal(greedy_next(z), z.argmax(-1))
    # T -> 0 approaches greedy
    torch.testing.assert_close(sampling_probs(z, 1e-3), sampling_probs(z, 0.0), rtol=0, atol=1e-6)


def test_samples_follow_the_renormalised_distribution():
    z = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -1.0])
    probs = sampling_probs(z, 1.3, top_k=4, top_p=0.8)               # what sample_next draws from
    n = 40_000
    draws = sample_next(z.expand(n, -1), 1.3, top_k=4, top_p=0.8, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=z.numel()).double()
    support = probs > 0
    assert counts[~support].sum() == 0                                 # never outside the kept set
    expected = n * probs[support].double()
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    # df = |support| - 1 <= 3; P(chi2_3 > 40) < 1e-8, so any seed passes while a wrong distribution
    # (e.g. not renormalised, or T ignored: chi2 in the hundreds) fails
    assert chi2 < 40, (chi2, counts, expected)
    again = sample_next(z.expand(n, -1), 1.3, top_k=4, top_p=0.8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)                                   # a seeded generator repeats


def test_leading_dimensions_and_minus_inf_logits():
    z = random_logits(b=6, v=10, seed=2).reshape(2, 3, 10)
    z[..., 0] = -math.inf                                              # a forbidden token
    probs = sampling_probs(z, 0.9, 5, 0.9)
    assert probs.shape == (2, 3, 10) and float(probs[..., 0].abs().max()) == 0.0
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3))
    assert sample_next(z, generator=torch.Generator().manual_seed(1)).shape == (2, 3)


@pytest.mark.parametrize("call, words", [
    (lambda: apply_temperature(torch.tensor([[1.0, float("nan")]]), 1.0), "NaN"),
    (lambda: apply_temperature(torch.tensor([[1.0, float("inf")]]), 1.0), "+inf"),
    (lambda: apply_temperature(torch.full((2, 3), -math.inf), 1.0), "all -inf"),
    (lambda: apply_temperature(torch.tensor([1, 2]), 1.0), "floating-point"),
    (lambda: apply_temperature(torch.zeros(2, 3), 0.0), "temperature"),
    (lambda: apply_temperature(torch.zeros(2, 3), -1.0), "-1.0"),
    (lambda: top_k_filter(torch.zeros(2, 3), 0), "k >= 1"),
    (lambda: top_k_filter(torch.zeros(2, 3), 2.5), "2.5"),
    (lambda: top_p_filter(torch.zeros(2, 3), 0.0), "0 < p <= 1"),
    (lambda: top_p_filter(torch.zeros(2, 3), 1.5), "1.5"),
    (lambda: sampling_probs(torch.zeros(2, 0), 1.0), "V >= 1"),
])
def test_bad_inputs_raise_value_errors(call, words):
    with pytest.raises(ValueError, match=words.replace("+", r"\+")):
        call()

"""Speculative sampling: the output distribution equals the target's exactly (every draft/accept path enumerated
with Fractions), the sampler follows that distribution, greedy speculative decoding equals greedy target decoding."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest
import torch

from attnbook import DecoderOnlyLM
from attnbook.speculative import (acceptance_rate, accept_probability, expected_tokens_per_call,
                                  residual_distribution, speculative_outcomes, speculative_step,
                                  target_sequence_probs)

V = 3


def _rational_model(seed, order=2, zeros=True):
    """next-token Fractions depending on the last order - 1 tokens, drawn once per history."""
    rng, table = random.Random(seed), {}

    def probs(seq):
        key = tuple(seq[len(seq) - min(len(seq), order - 1):])
        if key not in table:
            w = [rng.randint(0 if zeros else 1, 6) for _ in range(V)]
            w[rng.randrange(V)] += 1                                  # never all zero
            table[key] = [Fraction(x, sum(w)) for x in w]
        return table[key]
    return probs


def _emitted(target, draft, prefix, k, n, outcomes=speculative_outcomes):
    """Exact distribution of the first n tokens speculative decoding emits (steps repeated until n)."""
    if n == 0:
        return {(): Fraction(1)}
    dist = {}
    for tokens, prob in outcomes(target, draft, prefix, k, V).items():
        tokens = tokens[:n]
        for rest, p_rest in _emitted(target, draft, prefix + tokens, k, n - len(tokens), outcomes).items():
            dist[tokens + rest] = dist.get(tokens + rest, 0) + prob * p_rest
    return dist


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_path_enumerated_gives_exactly_the_target_distribution(k, seed):
    target, draft = _rational_model(seed, order=3), _rational_model(seed + 100, order=2)
    dist = _emitted(target, draft, (0,), k, 3)
    for tokens in itertools.product(range(V), repeat=3):
        assert dist.get(tokens, 0) == target_sequence_probs(target, (0,), tokens)    # exact, no tolerance
    assert sum(dist.values()) == 1


def test_the_draft_alone_is_not_the_target():
    """Control: the draft's own 3-token distribution differs from the target's (else the test above is empty)."""
    target, draft = _rational_model(0, order=3), _rational_model(100, order=2)
    diffs = [target_sequence_probs(target, (0,), t) - target_sequence_probs(draft, (0,), t)
             for t in itertools.product(range(V), repeat=3)]
    assert max(map(abs, diffs)) > Fraction(1, 50)


def test_residual_and_acceptance_rules():
    p = [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]
    q = [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)]
    assert residual_distribution(p, q) == [1, 0, 0]
    assert accept_probability(p, q, 1) == Fraction(1, 2) and accept_probability(p, q, 0) == 1
    assert residual_distribution(p, p) == p                           # nothing is ever rejected
    pt, qt = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64), torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64)
    torch.testing.assert_close(residual_distribution(pt, qt), torch.tensor([1.0, 0, 0], dtype=torch.float64))
    assert float(acceptance_rate(pt, qt)) == 0.75
    with pytest.raises(ValueError, match="was proposed but the draft gives it probability 0"):
        accept_probability(p, [Fraction(1), 0, 0], 1)


def _tensor_fns(target, draft):
    as_t = lambda probs: torch.tensor([float(x) for x in probs], dtype=torch.float64)
    t_fn = lambda prefix, props: torch.stack([as_t(target(tuple(prefix) + tuple(props[:i]))) for i in range(len(props) + 1)])
    d_fn = lambda seq: as_t(draft(tuple(seq)))
    return t_fn, d_fn


@pytest.mark.parametrize("k", [1, 3])
def test_the_sampler_follows_the_enumerated_distribution(k):
    target, draft = _rational_model(5, order=3), _rational_model(105, order=2)
    exact = speculative_outcomes(target, draft, (1,), k, V)
    t_fn, d_fn = _tensor_fns(target, draft)
    g = torch.Generator().manual_seed(0)
    n = 6000
    counts = {}
    for _ in range(n):
        out, _ = speculative_step(t_fn, d_fn, [1], k, generator=g)
        counts[tuple(out)] = counts.get(tuple(out), 0) + 1
    assert set(counts) <= set(exact)
    # chi-square over outcomes with expected count >= 5, the rest pooled; 0.9999 quantile bound (df <= 40: < 80)
    stat, pooled_e, pooled_o, cells = 0.0, 0.0, 0, 0
    for outcome, prob in exact.items():
        e = n * float(prob)
        if e >= 5:
            stat += (counts.get(outcome, 0) - e) ** 2 / e
            cells += 1
        else:
            pooled_e, pooled_o = pooled_e + e, pooled_o + counts.get(outcome, 0)
    if pooled_e > 0:
        stat += (pooled_o - pooled_e) ** 2 / pooled_e
    assert cells >= 3 and stat < 80


def test_greedy_speculative_equals_greedy_target_on_a_gpt():
    torch.manual_seed(0)
    target = DecoderOnlyLM(30, 32, 4, 2, 64).eval()
    draft_model = DecoderOnlyLM(30, 16, 2, 1, 32).eval()

    @torch.no_grad()
    def t_fn(prefix, props):                                          # one forward pass scores all k + 1 rows
        ids = torch.tensor([list(prefix) + list(props)])
        return target(ids)[0, len(prefix) - 1:].softmax(-1).double()

    @torch.no_grad()
    def d_fn(seq):
        return draft_model(torch.tensor([list(seq)]))[0, -1].softmax(-1).double()

    prompt = [3, 1, 4]
    want = target.generate(torch.tensor([prompt]), 25, temperature=0.0)[0, 3:].tolist()
    for k in (1, 2, 4):
        out, calls = list(prompt), 0
        while len(out) < len(prompt) + 25:
            new, _ = speculative_step(t_fn, d_fn, out, k, greedy=True)
            out += new
            calls += 1
        assert out[3:28] == want
        assert calls <= 25


def test_tokens_per_call_matches_the_formula_when_acceptance_is_independent():
    """p and q the same at every position: each proposal is kept with probability alpha = sum min(p, q)."""
    p = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    q = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
    alpha = float(acceptance_rate(p, q))
    t_fn = lambda prefix, props: p.expand(len(props) + 1, 3)
    d_fn = lambda seq: q
    g = torch.Generator().manual_seed(3)
    for k in (1, 2, 4):
        n = 4000
        mean = sum(len(speculative_step(t_fn, d_fn, [0], k, generator=g)[0]) for _ in range(n)) / n
        want = float(expected_tokens_per_call(alpha, k))
        assert abs(mean - want) < 0.06, (k, mean, want)
    assert float(expected_tokens_per_call(1.0, 3)) == 4 and float(expected_tokens_per_call(0.0, 3)) == 1


def test_bad_k_raises():
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        speculative_step(lambda a, b: None, lambda s: None, [0], 0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        expected_tokens_per_call(0.5, 0)

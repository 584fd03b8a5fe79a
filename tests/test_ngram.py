"""Kneser-Ney n-gram model against a dictionary implementation written from Chen & Goodman's formulas, a tiny
corpus computed by hand, and its invariants."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from fractions import Fraction

import numpy as np
import pytest
import torch

from attnbook.ngram import KneserNeyLM


def reference_kn(ids, V, n):
    """P(w | history) from Chen & Goodman's interpolated Kneser-Ney, with explicit count tables (slow,
    independent): the top order of a prediction (n, or len(history) + 1 if shorter) counts occurrences,
    the orders below it distinct left neighbours; each table has its own discount n1 / (n1 + 2 n2)."""
    ids = list(ids)

    def discounted(c):
        n1 = sum(1 for v in c.values() if v == 1)
        n2 = sum(1 for v in c.values() if v == 2)
        return c, (n1 / (n1 + 2 * n2) if n1 else 0.5)

    occurrences, continuations = {}, {}
    for k in range(1, n + 1):
        occurrences[k] = discounted(Counter(tuple(ids[i:i + k]) for i in range(len(ids) - k + 1)))
        left = defaultdict(set)
        for i in range(len(ids) - k):
            left[tuple(ids[i + 1:i + 1 + k])].add(ids[i])
        continuations[k] = discounted(Counter({g: len(us) for g, us in left.items()}))

    def prob(w, hist):
        hist = tuple(hist[max(0, len(hist) - (n - 1)):]) if n > 1 else ()
        top, p = len(hist) + 1, 1.0 / V
        for k in range(1, top + 1):
            c, d = occurrences[k] if k == top else continuations[k]
            h = hist[len(hist) - (k - 1):] if k > 1 else ()
            followers = {g[-1]: v for g, v in c.items() if g[:-1] == h}
            total = sum(followers.values())
            if total:
                p = max(followers.get(w, 0) - d, 0) / total + d * len(followers) / total * p
        return p
    return prob


def corpus(size=400, V=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V - 1, size)                 # token V-1 never occurs
    ids[::4] = 3                                       # some structure
    return ids


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_matches_the_textbook_recursion(n):
    V, ids = 8, corpus()
    lm, ref = KneserNeyLM(V, n).fit(ids), reference_kn(corpus(), V, n)
    for hist in ([], [3], [0, 3], [6, 6, 6], [7, 7], [1, 3, 2], [7]):
        got = lm.next_probs(np.array(hist, dtype=np.int64))
        want = torch.tensor([ref(w, hist) for w in range(V)], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_every_context_gives_a_distribution(n):
    V = 11
    lm = KneserNeyLM(V, n).fit(corpus(600, V, seed=n))
    rng = np.random.default_rng(1)
    for _ in range(30):
        p = lm.next_probs(rng.integers(0, V, rng.integers(0, 6)))
        assert abs(float(p.sum()) - 1) < 1e-12 and float(p.min()) > 0      # unseen tokens too


def test_a_tiny_corpus_computed_by_hand():
    # 0 1 0 1 2 1 0 1, V = 4 (token 3 unseen), n = 2. Bigrams: 01 x3, 10 x2, 12, 21 -> D = 2 / (2 + 2 * 1).
    # Left neighbours: of 1 {0, 2}, of 0 {1}, of 2 {1} -> continuation counts 2, 1, 1 (total 4, D = 1/2):
    #   P1(1) = 1.5/4 + 1/2 * 3/4 * 1/4 = 15/32, P1(0) = P1(2) = 0.5/4 + 3/32 = 7/32, P1(3) = 3/32.
    # After 1: 10 x2, 12 x1 (total 3, 2 types): P(0|1) = 1.5/3 + 1/2 * 2/3 * 7/32 = 55/96,
    #   P(2|1) = 0.5/3 + 7/96 = 23/96, P(1|1) = 1/3 * 15/32 = 15/96, P(3|1) = 3/96.
    # No history: unigram occurrences 3, 4, 1, 0 of 8, n1 = 1, n2 = 0 -> D = 1:
    #   P(0) = 2/8 + 1 * 3/8 * 1/4 = 11/32, P(1) = 15/32, P(2) = P(3) = 3/32.
    lm = KneserNeyLM(4, 2).fit([0, 1, 0, 1, 2, 1, 0, 1])
    after_1 = [Fraction(55, 96), Fraction(15, 96), Fraction(23, 96), Fraction(3, 96)]
    no_history = [Fraction(11, 32), Fraction(15, 32), Fraction(3, 32), Fraction(3, 32)]
    torch.testing.assert_close(lm.next_probs([1]), torch.tensor([float(f) for f in after_1], dtype=torch.float64),
                               rtol=1e-15, atol=0)
    torch.testing.assert_close(lm.next_probs([]), torch.tensor([float(f) for f in no_history], dtype=torch.float64),
                               rtol=1e-15, atol=0)
    assert lm.discounts == [0.5, 0.5]
    assert lm.num_counts == 3 + 4 + 3                  # unigrams 0 1 2; bigrams 01 10 12 21; continuations 0 1 2


@pytest.mark.parametrize("n", [2, 3, 4])
def test_windows_with_short_histories_match_the_reference(n):
    V, train = 9, corpus(700, 9, seed=11)
    lm, ref = KneserNeyLM(V, n).fit(train), reference_kn(train, V, n)
    rows = corpus(60, V, seed=12).reshape(6, 10)                          # each row scored on its own
    want = torch.tensor([[math.log(ref(int(r[i]), [int(t) for t in r[:i]])) for i in range(10)] for r in rows],
                        dtype=torch.float64)
    torch.testing.assert_close(lm.log_probs(rows), want, rtol=0, atol=1e-9)


def test_the_first_token_of_a_window_is_scored_by_the_unigram_of_occurrences():
    V, train = 9, corpus(700, 9, seed=3)
    trigram, unigram, bigram = (KneserNeyLM(V, n).fit(train) for n in (3, 1, 2))
    rows = corpus(40, V, seed=4).reshape(4, 10)
    torch.testing.assert_close(trigram.log_probs(rows)[:, 0], unigram.log_probs(rows)[:, 0], rtol=0, atol=0)
    torch.testing.assert_close(trigram.log_probs(rows)[:, 1], bigram.log_probs(rows)[:, 1], rtol=0, atol=0)


def test_log_probs_are_the_next_token_probabilities_along_the_stream():
    V, lm = 8, KneserNeyLM(8, 3).fit(corpus())
    test = corpus(60, seed=5)
    lp = lm.log_probs(test)
    want = [math.log(float(lm.next_probs(test[max(0, i - 2):i])[test[i]])) for i in range(60)]
    torch.testing.assert_close(lp, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert lm.perplexity(test) == pytest.approx(math.exp(-sum(want) / 60), rel=1e-12)
    assert torch.equal(lm.log_probs(torch.as_tensor(test)), lp)           # tensors welcome


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_truncated_model_is_the_lower_order_fitted_on_the_same_stream(n):
    V, train = 9, corpus(700, 9, seed=21)
    rows = corpus(60, V, seed=22).reshape(6, 10)
    fitted, cut = KneserNeyLM(V, n).fit(train), KneserNeyLM(V, 4).fit(train).truncated(n)
    assert cut.order == n and cut.num_counts == fitted.num_counts and cut.discounts == fitted.discounts
    assert torch.equal(cut.log_probs(rows), fitted.log_probs(rows))
    assert torch.equal(cut.next_probs([3, 1]), fitted.next_probs([3, 1]))
    with pytest.raises(ValueError, match=r"\[1, 4\]"):
        KneserNeyLM(V, 4).fit(train).truncated(5)


def test_higher_orders_fit_structured_text_better():
    ids = np.tile(np.array([0, 1, 2, 0, 2, 1]), 200)    # every token has two successors; every pair one
    ppl = [KneserNeyLM(4, n).fit(ids).perplexity(ids) for n in (1, 2, 3)]
    assert ppl[0] > 2.9 and 1.9 < ppl[1] < 2.2 and ppl[2] < 1.1


def test_discounts_follow_ney():
    ids = np.array([0, 1, 0, 1, 0, 2, 3, 0, 1, 4])
    lm = KneserNeyLM(5, 2).fit(ids)
    bigrams = Counter(zip(ids[:-1], ids[1:]))                            # (0,1)x3, (1,0)x2, others once
    n1 = sum(1 for v in bigrams.values() if v == 1)
    n2 = sum(1 for v in bigrams.values() if v == 2)
    assert lm.discounts[1] == pytest.approx(n1 / (n1 + 2 * n2))


@pytest.mark.parametrize("call, words", [
    (lambda: KneserNeyLM(0, 3), "vocab_size"),
    (lambda: KneserNeyLM(5, 0), "order"),
    (lambda: KneserNeyLM(100000, 4), "int64"),
    (lambda: KneserNeyLM(5, 3).fit([0, 1, 5]), r"\[0, 5\).*max 5"),
    (lambda: KneserNeyLM(5, 3).fit(np.zeros((2, 3), dtype=int)), "1-D"),
    (lambda: KneserNeyLM(5, 3).fit([0, 1, 2]).log_probs(np.zeros((2, 2, 2), dtype=int)), "1-D or 2-D"),
    (lambda: KneserNeyLM(5, 3).fit([0.5, 1.0, 2.0]), "integer"),
    (lambda: KneserNeyLM(5, 3).fit([0, 1]), "at least order=3"),
    (lambda: KneserNeyLM(5, 3).log_probs([0, 1]), "fit"),
    (lambda: KneserNeyLM(5, 2).fit([0, 1, 2]).next_probs([-1]), "min -1"),
])
def test_bad_inputs_raise_value_errors(call, words):
    with pytest.raises(ValueError, match=words):
        call()

"""Speculative sampling (Leviathan et al., 2023; Chen et al., 2023): a cheap draft model proposes k tokens, the
target model scores all of them in one call, and a rejection rule keeps the output distributed exactly as the
target's own samples.

For proposal x drawn from the draft's q(.), with the target's p(.) at the same position:

    accept x with probability min(1, p(x) / q(x));
    at the first rejection, draw instead from the residual  r(.) = max(0, p(.) - q(.)) / sum max(0, p - q);
    if all k are accepted, draw one more token from the target's p at position k + 1 (it was scored anyway).

Then P(token = y) = min(p(y), q(y)) + max(0, p(y) - q(y)) = p(y) at every position. ``speculative_outcomes``
enumerates every draft/accept path of one step with exact arithmetic (Fractions work) so that this can be
checked exactly on a small vocabulary; ``speculative_step`` is the sampler.

Distributions are 1-D sequences of V probabilities (tensors, or lists of Fractions for the exact path).
``draft(prefix)`` returns q after ``prefix``; ``target(prefix, proposals)`` returns the k + 1 rows of p after
prefix + proposals[:i], i = 0 .. k: one target call (a Transformer scores them in one forward pass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from numbers import Integral

import torch
from torch import Tensor

__all__ = ["accept_probability", "residual_distribution", "speculative_step", "speculative_outcomes",
           "target_sequence_probs", "expected_tokens_per_call", "acceptance_rate"]


def accept_probability(p, q, token: int):
    """min(1, p(token) / q(token)): the chance a proposal drawn from q is kept (q(token) > 0 since it was drawn)."""
    if q[token] <= 0:
        raise ValueError(f"token {token} was proposed but the draft gives it probability {q[token]}")
    return min(1, p[token] / q[token])


def residual_distribution(p, q):
    """max(0, p - q), normalised: where the target wants more than the draft gave. Shape: (V,) -> (V,).

    If p = q everywhere the residual is empty; then no proposal is ever rejected, and p itself is returned.
    """
    if len(p) != len(q):
        raise ValueError(f"p and q must have the same length, got {len(p)} and {len(q)}")
    if isinstance(p, Tensor):
        r = (p - q).clamp(min=0)
        total = r.sum()
        return p.clone() if total <= 0 else r / total
    r = [max(0, a - b) for a, b in zip(p, q)]
    total = sum(r)
    return list(p) if total == 0 else [x / total for x in r]


def _draw(probs: Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs.double(), 1, generator=generator))


def speculative_step(target: Callable, draft: Callable, prefix: Sequence[int], k: int, *, greedy: bool = False,
                     generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """One round: k draft calls, one target call; return (the 1 .. k + 1 new tokens, how many proposals were kept).

    ``greedy=True``: the draft proposes its argmax, a proposal is kept iff it is the target's argmax, and the first
    mismatch is replaced by the target's argmax, so the output is greedy target decoding, token for token.

    Shape: draft(prefix) -> (V,); target(prefix, proposals) -> (k + 1, V)
    """
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    context, proposals, drafts = list(prefix), [], []
    for _ in range(k):                                                # k cheap, serial draft calls
        q = draft(context + proposals)
        x = int(q.argmax()) if greedy else _draw(q, generator)
        proposals.append(x)
        drafts.append(q)
    p_rows = target(context, proposals)                               # (k + 1, V): one target call
    if len(p_rows) != k + 1:
        raise ValueError(f"target must return k + 1 = {k + 1} rows, got {len(p_rows)}")
    out = []
    for i, x in enumerate(proposals):
        p, q = p_rows[i], drafts[i]
        if greedy:
            keep = x == int(p.argmax())
        else:
            u = torch.rand((), generator=generator, dtype=torch.float64)
            keep = bool(u < accept_probability(p, q, x))
        if not keep:                                                  # first rejection: resample and stop
            y = int(p.argmax()) if greedy else _draw(residual_distribution(p, q), generator)
            return out + [y], i
        out.append(x)
    last = p_rows[k]                                                  # all kept: a free token from the target
    return out + [int(last.argmax()) if greedy else _draw(last, generator)], k


def speculative_outcomes(target_probs: Callable, draft_probs: Callable, prefix: tuple, k: int,
                         vocab_size: int) -> dict[tuple, object]:
    """The exact distribution of what one speculative step emits: {tuple of new tokens: probability}.

    Sums over every draft path (vocab_size ** k of them) and every accept/reject outcome; with Fraction
    probabilities the result is exact. ``target_probs(seq)`` / ``draft_probs(seq)`` give p / q after seq.
    """
    out: dict[tuple, object] = {}

    def add(tokens, prob):
        if prob:
            out[tokens] = out.get(tokens, 0) + prob

    def walk(path: tuple, prob):                                      # path: proposals drawn so far
        if len(path) == k:
            still = prob                                              # probability of reaching proposal i accepted
            for i, x in enumerate(path):
                p, q = target_probs(prefix + path[:i]), draft_probs(prefix + path[:i])
                a = accept_probability(p, q, x)
                r = residual_distribution(p, q)
                for y in range(vocab_size):                           # rejected at i, residual draws y
                    add(path[:i] + (y,), still * (1 - a) * r[y])
                still = still * a
            p_last = target_probs(prefix + path)
            for y in range(vocab_size):
                add(path + (y,), still * p_last[y])
            return
        q = draft_probs(prefix + path)
        for x in range(vocab_size):
            if q[x] > 0:
                walk(path + (x,), prob * q[x])

    walk((), Fraction(1) if isinstance(draft_probs(prefix)[0], Fraction) else 1.0)
    return out


def target_sequence_probs(target_probs: Callable, prefix: tuple, tokens: tuple):
    """P_target(tokens | prefix) = prod_i p(tokens[i] | prefix + tokens[:i])."""
    prob = 1
    for i, y in enumerate(tokens):
        prob = prob * target_probs(prefix + tuple(tokens[:i]))[y]
    return prob


def acceptance_rate(p: Tensor, q: Tensor) -> Tensor:
    """alpha = E_{x~q}[min(1, p(x)/q(x))] = sum_x min(p(x), q(x)) = 1 - total variation(p, q). Shape: (..., V) -> (...)."""
    return torch.minimum(p, q).sum(-1)


def expected_tokens_per_call(alpha, k: int):
    """(1 - alpha^(k+1)) / (1 - alpha): tokens per target call when each proposal is kept with probability alpha
    independently (Leviathan et al., 2023, eq. 1); k + 1 at alpha = 1."""
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    alpha = torch.as_tensor(alpha, dtype=torch.float64)
    safe = torch.where(alpha < 1, alpha, torch.zeros_like(alpha))
    return torch.where(alpha < 1, (1 - safe ** (k + 1)) / (1 - safe), torch.full_like(alpha, k + 1.0))

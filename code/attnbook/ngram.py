"""An n-gram language model with interpolated Kneser-Ney smoothing (Chen & Goodman, 1999): the baseline
a neural language model has to beat on the same tokens.

With history h = (h_1, ..., h_{k-1}) and its shortening h' = (h_2, ..., h_{k-1}), order k predicts

    P_k(w | h) = max(c_k(h w) - D_k, 0) / c_k(h .)  +  D_k * N_k(h .) / c_k(h .) * P_{k-1}(w | h')

where c_k(h .) = sum_w c_k(h w), N_k(h .) = #{w : c_k(h w) > 0}; a history never seen (c_k(h .) = 0)
passes P_{k-1}(w | h') through unchanged, and P_0(w) = 1 / V. The highest order counts occurrences;
lower orders count continuations, c_k(g) = #{u : the (k+1)-gram u g occurs}, so a token seen after
many different histories gets more of the mass set aside for unseen ones. D_k = n1 / (n1 + 2 n2) with
n1, n2 the numbers of k-grams counted once and twice (Ney et al., 1994). Every P_k sums to 1 over V.

All counts live in sorted NumPy arrays keyed by the gram read as a base-V number, so fitting and
scoring are vectorised. Shape legend: N tokens, V vocabulary, n order.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
import torch
from torch import Tensor

__all__ = ["KneserNeyLM"]


def _as_ids(tokens, vocab_size: int, name: str) -> np.ndarray:
    arr = tokens.detach().cpu().numpy() if isinstance(tokens, Tensor) else np.asarray(tokens)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D sequence of integer token ids, got {arr.dtype} {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise ValueError(f"{name} ids must lie in [0, {vocab_size}), got min {arr.min()}, max {arr.max()}")
    return arr.astype(np.int64)


def _gram_keys(ids: np.ndarray, k: int, vocab_size: int) -> np.ndarray:
    """Every k-gram of ids as one base-V integer. Shape: (N,) -> (N - k + 1,)."""
    keys = np.zeros(max(len(ids) - k + 1, 0), dtype=np.int64)
    for j in range(k):
        keys = keys * vocab_size + ids[j:len(ids) - k + 1 + j]
    return keys


def _lookup(sorted_keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[i] where sorted_keys[i] == query, else 0 (vectorised dictionary look-up)."""
    if sorted_keys.size == 0:
        return np.zeros(query.shape, dtype=values.dtype)
    pos = np.minimum(np.searchsorted(sorted_keys, query), sorted_keys.size - 1)
    return np.where(sorted_keys[pos] == query, values[pos], 0)


class KneserNeyLM:
    """Interpolated Kneser-Ney n-gram model over token ids 0 .. V-1 (e.g. characters).

    ``fit(ids)`` counts one token stream; ``log_probs(ids)`` scores every token of another stream given
    the up to n - 1 tokens before it (fewer at its start); ``next_probs(history)`` is the whole
    next-token distribution.

    Shape:
        fit(ids (N,)); log_probs(ids (N,)) -> (N,) float64 natural logs; next_probs(history) -> (V,)
    """

    def __init__(self, vocab_size: int, order: int = 3):
        for name, n in (("vocab_size", vocab_size), ("order", order)):
            if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        if vocab_size ** order >= 2 ** 62:
            raise ValueError(f"vocab_size={vocab_size} ** order={order} does not fit the int64 gram keys")
        self.vocab_size, self.order = int(vocab_size), int(order)
        self.levels: list[dict[str, np.ndarray | float]] | None = None

    def fit(self, ids) -> "KneserNeyLM":
        ids = _as_ids(ids, self.vocab_size, "ids")
        if len(ids) < self.order:
            raise ValueError(f"need at least order={self.order} tokens to fit, got {len(ids)}")
        V, levels = self.vocab_size, []
        for k in range(1, self.order + 1):
            if k == self.order:                                    # occurrences
                keys, counts = np.unique(_gram_keys(ids, k, V), return_counts=True)
            else:                                                  # continuations: distinct left neighbours
                longer = np.unique(_gram_keys(ids, k + 1, V))
                keys, counts = np.unique(longer % V ** k, return_counts=True)
            n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
            discount = n1 / (n1 + 2 * n2) if n1 else 0.5
            ctx, ctx_types = np.unique(keys // V, return_counts=True)      # keys sorted, so contexts grouped
            ctx_total = np.add.reduceat(counts, np.searchsorted(keys // V, ctx)) if keys.size else counts
            levels.append({"keys": keys, "counts": counts, "ctx": ctx, "ctx_total": ctx_total,
                           "ctx_types": ctx_types, "discount": discount})
        self.levels = levels
        return self

    @property
    def discounts(self) -> list[float]:
        """D_1, ..., D_n."""
        self._fitted()
        return [float(level["discount"]) for level in self.levels]

    def _fitted(self) -> None:
        if self.levels is None:
            raise ValueError("call fit(ids) before scoring")

    def _interpolate(self, grams: list[np.ndarray | None], size: int) -> np.ndarray:
        """P_n(w | h) for ``size`` (history, w) pairs; grams[k-1] holds their k-gram keys (None: too short)."""
        p = np.full(size, 1.0 / self.vocab_size)
        for level, g in zip(self.levels, grams):
            if g is None:
                break
            c = _lookup(level["keys"], level["counts"], g[1]).astype(np.float64)
            total = _lookup(level["ctx"], level["ctx_total"], g[0]).astype(np.float64)
            types = _lookup(level["ctx"], level["ctx_types"], g[0]).astype(np.float64)
            d, seen = level["discount"], total > 0
            safe = np.where(seen, total, 1.0)
            mixed = np.maximum(c - d, 0.0) / safe + d * types / safe * p[g[2]]
            p = p.copy()
            p[g[2]] = np.where(seen, mixed, p[g[2]])
        return p

    def log_probs(self, ids) -> Tensor:
        """log P(ids[i] | ids[i-n+1 : i]) for every i (shorter histories at the start). Shape: (N,) -> (N,)."""
        self._fitted()
        ids = _as_ids(ids, self.vocab_size, "ids")
        V, N = self.vocab_size, len(ids)
        grams = []
        for k in range(1, self.order + 1):
            rows = np.arange(k - 1, N)                              # positions with k - 1 tokens before
            keys = np.zeros(rows.size, dtype=np.int64)
            for j in range(k):
                keys = keys * V + ids[rows - k + 1 + j]
            grams.append((keys // V, keys, rows) if rows.size else None)
        return torch.from_numpy(np.log(self._interpolate(grams, N)))

    def next_probs(self, history) -> Tensor:
        """P(w | last n - 1 tokens of history) for every w. Shape: history (L,) -> (V,) float64."""
        self._fitted()
        hist = _as_ids(history, self.vocab_size, "history")[-(self.order - 1):] if self.order > 1 \
            else np.zeros(0, dtype=np.int64)
        V, grams, w = self.vocab_size, [], np.arange(self.vocab_size)
        for k in range(1, self.order + 1):
            if k - 1 > len(hist):
                grams.append(None)
                continue
            ctx = 0
            for t in hist[len(hist) - (k - 1):] if k > 1 else []:
                ctx = ctx * V + int(t)
            grams.append((np.full(V, ctx, dtype=np.int64), ctx * V + w, w))
        return torch.from_numpy(self._interpolate(grams, V))

    def perplexity(self, ids) -> float:
        """exp(-mean log P) over the stream (per token)."""
        return math.exp(-float(self.log_probs(ids).mean()))

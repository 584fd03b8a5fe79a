"""An n-gram language model with interpolated Kneser-Ney smoothing (Chen & Goodman, 1999, eq. 18 with one
discount per order): the baseline a neural language model has to beat on the same tokens.

With history h = (h_1, ..., h_{k-1}) and its shortening h' = (h_2, ..., h_{k-1}), order k predicts

    P_k(w | h) = max(c_k(h w) - D_k, 0) / c_k(h .)  +  D_k * N_k(h .) / c_k(h .) * P_{k-1}(w | h')

where c_k(h .) = sum_w c_k(h w), N_k(h .) = #{w : c_k(h w) > 0}; a history never seen (c_k(h .) = 0)
passes P_{k-1}(w | h') through unchanged, and P_0(w) = 1 / V. The top order of a prediction counts
occurrences; the orders below it count continuations, c_k(g) = #{u : the (k+1)-gram u g occurs}, so a token
seen after many different histories gets more of the mass set aside for unseen ones. A token with only
j < n - 1 tokens before it (the start of a stream) is predicted by the order-(j + 1) model, whose top order
again counts occurrences: at the very first token that is the unigram of occurrences. Each count table has
its own D = n1 / (n1 + 2 n2), n1 and n2 the numbers of its grams counted once and twice (Ney et al., 1994).
*Modified* Kneser-Ney (Chen & Goodman's best) uses three discounts per order (for counts 1, 2, 3+); this
model does not. Every P_k sums to 1 over V.

All counts live in sorted NumPy arrays keyed by the gram read as a base-V number, so fitting and
scoring are vectorised. Shape legend: N tokens, R rows, V vocabulary, n order.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
import torch
from torch import Tensor

__all__ = ["KneserNeyLM"]


def _as_ids(tokens, vocab_size: int, name: str, dims: tuple[int, ...] = (1,)) -> np.ndarray:
    arr = tokens.detach().cpu().numpy() if isinstance(tokens, Tensor) else np.asarray(tokens)
    if arr.size == 0 and arr.ndim == 1:
        arr = arr.astype(np.int64)                                   # an empty history: [] is float64
    if arr.ndim not in dims or not np.issubdtype(arr.dtype, np.integer):
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be a {want} array of integer token ids, got {arr.dtype} {arr.shape}")
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


def _table(keys: np.ndarray, counts: np.ndarray, vocab_size: int) -> dict:
    """Counts of k-grams (sorted keys) with their per-history totals, types and the discount D."""
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    ctx, ctx_types = np.unique(keys // vocab_size, return_counts=True)   # keys sorted, so histories grouped
    ctx_total = np.add.reduceat(counts, np.searchsorted(keys // vocab_size, ctx)) if keys.size else counts
    return {"keys": keys, "counts": counts, "ctx": ctx, "ctx_total": ctx_total, "ctx_types": ctx_types,
            "discount": n1 / (n1 + 2 * n2) if n1 else 0.5}


class KneserNeyLM:
    """Interpolated Kneser-Ney n-gram model over token ids 0 .. V-1 (e.g. characters).

    ``fit(ids)`` counts one token stream (``truncated(k)`` then gives its order-k model); ``log_probs(ids)`` scores every token of another stream (or of
    each row of a 2-D array, rows independent) given the up to n - 1 tokens before it in the same stream
    or row; ``next_probs(history)`` is the whole next-token distribution.

    Shape:
        fit(ids (N,)); log_probs(ids (N,) or (R, N)) -> same shape, float64 natural logs;
        next_probs(history (L,)) -> (V,)
    """

    def __init__(self, vocab_size: int, order: int = 3):
        for name, n in (("vocab_size", vocab_size), ("order", order)):
            if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        if vocab_size ** order >= 2 ** 62:
            raise ValueError(f"vocab_size={vocab_size} ** order={order} does not fit the int64 gram keys")
        self.vocab_size, self.order = int(vocab_size), int(order)
        self.occurrences: list[dict] | None = None     # [k - 1]: counts of k-grams
        self.continuations: list[dict] | None = None   # [k - 1]: distinct left neighbours of k-grams, k < n

    def fit(self, ids) -> "KneserNeyLM":
        ids = _as_ids(ids, self.vocab_size, "ids")
        if len(ids) < self.order:
            raise ValueError(f"need at least order={self.order} tokens to fit, got {len(ids)}")
        V = self.vocab_size
        self.occurrences = [_table(*np.unique(_gram_keys(ids, k, V), return_counts=True), V)
                            for k in range(1, self.order + 1)]
        # distinct left neighbours of each k-gram: the distinct (k+1)-grams (already counted) minus their first token
        self.continuations = [_table(*np.unique(self.occurrences[k]["keys"] % V ** k, return_counts=True), V)
                              for k in range(1, self.order)]
        return self

    def truncated(self, order: int) -> "KneserNeyLM":
        """The order-``order`` model of the same stream without counting it again (order <= n): fitting that
        order builds exactly the first ``order`` occurrence and ``order - 1`` continuation tables of this one."""
        self._fitted()
        if isinstance(order, bool) or not isinstance(order, Integral) or not 1 <= order <= self.order:
            raise ValueError(f"order must be an integer in [1, {self.order}], got {order!r}")
        lower = KneserNeyLM(self.vocab_size, int(order))
        lower.occurrences, lower.continuations = self.occurrences[:order], self.continuations[:order - 1]
        return lower

    @property
    def discounts(self) -> list[float]:
        """D_1, ..., D_n of a full history (continuation tables below n, occurrences at n)."""
        self._fitted()
        return [float(t["discount"]) for t in self.continuations + self.occurrences[-1:]]

    @property
    def num_counts(self) -> int:
        """How many counts the model stores (every occurrence and continuation table): its size."""
        self._fitted()
        return sum(int(t["keys"].size) for t in self.occurrences + self.continuations)

    def _fitted(self) -> None:
        if self.occurrences is None:
            raise ValueError("call fit(ids) before scoring")

    def _interpolate(self, keys: list[np.ndarray]) -> np.ndarray:
        """P_m(w | h) for a batch of (h, w) with m = len(keys); keys[k - 1] holds their k-gram keys."""
        V, top = self.vocab_size, len(keys)
        p = np.full(keys[0].shape, 1.0 / V)
        for k, g in enumerate(keys, start=1):
            t = self.occurrences[k - 1] if k == top else self.continuations[k - 1]
            c = _lookup(t["keys"], t["counts"], g).astype(np.float64)
            total = _lookup(t["ctx"], t["ctx_total"], g // V).astype(np.float64)
            types = _lookup(t["ctx"], t["ctx_types"], g // V).astype(np.float64)
            d, seen = t["discount"], total > 0
            safe = np.where(seen, total, 1.0)
            p = np.where(seen, np.maximum(c - d, 0.0) / safe + d * types / safe * p, p)
        return p

    def log_probs(self, ids) -> Tensor:
        """log P(ids[..., i] | the up to n - 1 tokens before it in its row). Shape: (N,) or (R, N) -> same."""
        self._fitted()
        ids = _as_ids(ids, self.vocab_size, "ids", dims=(1, 2))
        rows = ids.reshape(-1, ids.shape[-1])                        # (R, N)
        V, n, N = self.vocab_size, self.order, rows.shape[1]
        out = np.empty(rows.shape, dtype=np.float64)
        for start in range(min(n, N)):                               # columns with `start` tokens before them,
            cols = np.arange(start, N) if start == n - 1 else np.array([start])   # or n - 1 and more
            keys, gram = [], np.zeros((rows.shape[0], cols.size), dtype=np.int64)
            for k in range(1, start + 2):                            # k-gram ending at each column
                gram = gram + rows[:, cols - k + 1] * V ** (k - 1)
                keys.append(gram.copy())
            out[:, cols] = np.log(self._interpolate(keys))
        return torch.from_numpy(out.reshape(ids.shape))

    def next_probs(self, history) -> Tensor:
        """P(w | last n - 1 tokens of history) for every w. Shape: history (L,) -> (V,) float64."""
        self._fitted()
        hist = _as_ids(history, self.vocab_size, "history")
        hist = hist[len(hist) - min(len(hist), self.order - 1):]
        V, w, keys = self.vocab_size, np.arange(self.vocab_size), []
        for k in range(1, len(hist) + 2):
            ctx = 0
            for t in hist[len(hist) - (k - 1):]:
                ctx = ctx * V + int(t)
            keys.append(ctx * V + w)
        return torch.from_numpy(self._interpolate(keys))

    def perplexity(self, ids) -> float:
        """exp(-mean log P) over the stream (per token)."""
        return math.exp(-float(self.log_probs(ids).mean()))

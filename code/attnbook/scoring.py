"""Attention scoring functions and the generic ``attend``: weights = softmax(score(q, k)), output = weights v.

Every score maps a batch of queries and keys to one number per (query, key) pair:

    score(q, k): q (B, Tq, Dq), k (B, Tk, Dk) -> (B, Tq, Tk)

Any number of leading batch dimensions works in place of B, as long as q and k have the same ones.
The parameter-free scores (dot, scaled dot, cosine) need Dq == Dk; the learned ones (additive,
multiplicative) map between different sizes.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from .softmax import masked_softmax, softmax

__all__ = ["dot_score", "scaled_dot_score", "cosine_score", "additive_score", "multiplicative_score",
           "AdditiveScore", "MultiplicativeScore", "attend"]

ScoreFn = Callable[[Tensor, Tensor], Tensor]


def _check_qk(q: Tensor, k: Tensor, same_size: bool) -> None:
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, Tensor) or not t.is_floating_point() or t.dim() < 2:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a floating tensor of shape (..., T, D), got {got}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q of shape {tuple(q.shape)} and k of shape {tuple(k.shape)} "
                         "have different batch dimensions")
    if same_size and q.size(-1) != k.size(-1):
        raise ValueError(f"q of shape {tuple(q.shape)} and k of shape {tuple(k.shape)} need the same "
                         "feature size D for this score; use a learned score to map Dq to Dk")


def dot_score(q: Tensor, k: Tensor) -> Tensor:
    """Dot product, score(q, k) = qᵀk.

    Shape:
        q: (..., Tq, D); k: (..., Tk, D) -> (..., Tq, Tk).
    """
    _check_qk(q, k, same_size=True)
    return q @ k.transpose(-2, -1)  # (..., Tq, D) @ (..., D, Tk)


def scaled_dot_score(q: Tensor, k: Tensor) -> Tensor:
    """Scaled dot product (Vaswani et al., 2017), score(q, k) = qᵀk / sqrt(D).

    Shape:
        q: (..., Tq, D); k: (..., Tk, D) -> (..., Tq, Tk).
    """
    _check_qk(q, k, same_size=True)
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))


def cosine_score(q: Tensor, k: Tensor, scale: float = 1.0, eps: float = 1e-8) -> Tensor:
    """Cosine similarity times ``scale``: scale · qᵀk / (max(‖q‖, eps) · max(‖k‖, eps)), in [-scale, scale].

    Shape:
        q: (..., Tq, D); k: (..., Tk, D) -> (..., Tq, Tk).
    """
    _check_qk(q, k, same_size=True)
    qn = q / q.norm(dim=-1, keepdim=True).clamp_min(eps)  # (..., Tq, D), unit rows
    kn = k / k.norm(dim=-1, keepdim=True).clamp_min(eps)  # (..., Tk, D)
    return scale * (qn @ kn.transpose(-2, -1))


def additive_score(q: Tensor, k: Tensor, w_q: Tensor, w_k: Tensor, v: Tensor, b: Tensor | None = None) -> Tensor:
    """Additive score (Bahdanau et al., 2015), score(q, k) = vᵀ tanh(W_q q + W_k k [+ b]).

    W_q q is computed once per query and W_k k once per key; the tanh runs on every pair, so an
    intermediate of shape (..., Tq, Tk, A) is formed. The optional bias b (not in the paper) moves
    tanh off its odd centre: without it, zero-mean q and k interact only at third order.

    Shape:
        q: (..., Tq, Dq); k: (..., Tk, Dk); w_q: (A, Dq); w_k: (A, Dk); v: (A,); b: (A,) or None
        -> (..., Tq, Tk).
    """
    _check_qk(q, k, same_size=False)
    if w_q.shape != (v.numel(), q.size(-1)) or w_k.shape != (v.numel(), k.size(-1)) or v.dim() != 1 \
            or (b is not None and b.shape != v.shape):
        raise ValueError(f"w_q {tuple(w_q.shape)}, w_k {tuple(w_k.shape)}, v {tuple(v.shape)}"
                         f"{'' if b is None else ', b ' + str(tuple(b.shape))} must be "
                         f"(A, Dq={q.size(-1)}), (A, Dk={k.size(-1)}), (A,)")
    pq = q @ w_q.T  # (..., Tq, A)
    pk = k @ w_k.T  # (..., Tk, A)
    if b is not None:
        pk = pk + b
    hidden = torch.tanh(pq.unsqueeze(-2) + pk.unsqueeze(-3))  # (..., Tq, 1, A) + (..., 1, Tk, A)
    return hidden @ v  # (..., Tq, Tk, A) @ (A,) -> (..., Tq, Tk)


def multiplicative_score(q: Tensor, k: Tensor, w: Tensor) -> Tensor:
    """Multiplicative score, Luong et al. (2015) "general": score(q, k) = qᵀ W k.

    Shape:
        q: (..., Tq, Dq); k: (..., Tk, Dk); w: (Dq, Dk) -> (..., Tq, Tk).
    """
    _check_qk(q, k, same_size=False)
    if w.shape != (q.size(-1), k.size(-1)):
        raise ValueError(f"w of shape {tuple(w.shape)} must be (Dq={q.size(-1)}, Dk={k.size(-1)})")
    return (q @ w) @ k.transpose(-2, -1)  # (..., Tq, Dk) @ (..., Dk, Tk)


class AdditiveScore(nn.Module):
    """Learned additive score vᵀ tanh(W_q q + W_k k [+ b]) with attention width A = hidden_dim.

    ``bias=False`` is the paper's formula; ``bias=True`` adds b ~ N(0, 1) inside the tanh.

    Shape:
        q: (..., Tq, query_dim); k: (..., Tk, key_dim) -> (..., Tq, Tk).
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int, bias: bool = False):
        super().__init__()
        self.w_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.w_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Parameter(torch.empty(hidden_dim).uniform_(-hidden_dim ** -0.5, hidden_dim ** -0.5))
        self.register_parameter("b", nn.Parameter(torch.randn(hidden_dim)) if bias else None)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return additive_score(q, k, self.w_q.weight, self.w_k.weight, self.v, self.b)


class MultiplicativeScore(nn.Module):
    """Learned bilinear score qᵀ W k (Luong "general"); W starts as N(0, 1/(Dq·Dk)^½) entries.

    ``key_term=True`` adds a learned term that depends on the key only, kᵀ U k (U starts at 0),
    the form of the key-length penalty in a Gaussian Bayes rule.

    Shape:
        q: (..., Tq, query_dim); k: (..., Tk, key_dim) -> (..., Tq, Tk).
    """

    def __init__(self, query_dim: int, key_dim: int, key_term: bool = False):
        super().__init__()
        # std (Dq Dk)^(-1/4) keeps qᵀWk at unit variance for unit-variance q and k.
        self.weight = nn.Parameter(torch.randn(query_dim, key_dim) * (query_dim * key_dim) ** -0.25)
        self.register_parameter("u", nn.Parameter(torch.zeros(key_dim, key_dim)) if key_term else None)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        s = multiplicative_score(q, k, self.weight)
        if self.u is not None:
            s = s + ((k @ self.u) * k).sum(-1).unsqueeze(-2)  # kᵀUk, (..., 1, Tk): the same for every query
        return s


def attend(q: Tensor, k: Tensor, v: Tensor, score_fn: ScoreFn = scaled_dot_score,
           mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Generic attention: weights = softmax over keys of score_fn(q, k), output = weights @ v.

    ``mask`` is boolean, True = may attend, broadcastable to (..., Tq, Tk). A query with no key to
    attend to gets all-zero weights and a zero output (``masked_softmax``), never NaN.

    Shape:
        q: (..., Tq, Dq); k: (..., Tk, Dk); v: (..., Tk, Dv); mask: broadcastable to (..., Tq, Tk)
        -> output (..., Tq, Dv), weights (..., Tq, Tk).
    """
    if not isinstance(v, Tensor) or v.dim() < 2 or v.shape[:-1] != k.shape[:-1]:
        got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v of shape {got} must match k of shape {tuple(k.shape)} "
                         "in every dimension but the last")
    scores = score_fn(q, k)  # (..., Tq, Tk)
    if scores.shape != q.shape[:-1] + k.shape[-2:-1]:
        raise ValueError(f"score_fn returned shape {tuple(scores.shape)}, expected "
                         f"{tuple(q.shape[:-1] + k.shape[-2:-1])}")
    weights = softmax(scores, dim=-1) if mask is None else masked_softmax(scores, mask, dim=-1)
    return weights @ v, weights  # (..., Tq, Tk) @ (..., Tk, Dv)

"""Multi-head attention (Vaswani et al., 2017, §3.2.2): h scaled dot-product attentions side by side.

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),   i = 1, ..., h
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O

with W_i^Q, W_i^K, W_i^V of size d_model x d_head, d_head = d_model / h, and W^O of size d_model x d_model.
The h per-head projections are stored side by side as the columns of one d_model x d_model matrix, so
all heads are projected by one matmul and attended in one batched call (no Python loop over heads).
Grouped-query heads, rotary positions and the key/value cache extend this layer in attnbook.grouped_query.

Shape legend: B batch, H = num_heads, Hkv = num_kv_heads, Tq queries, Tk keys/values, D = d_model, Dh = D / H.
Masks are torch.bool, True = may attend (``nn.MultiheadAttention`` uses True = blocked).
"""

from __future__ import annotations

from numbers import Integral, Real

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention

__all__ = ["split_heads", "merge_heads", "repeat_kv", "multihead_macs", "MultiHeadAttention"]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """Cut the feature axis into ``num_heads`` slices and move heads next to the batch.

    Feature j of x belongs to head j // Dh (the slices are contiguous).

    Shape:
        x: (B, T, D) -> (B, H, T, Dh), a view when x is contiguous.
    """
    if x.dim() != 3 or x.size(-1) % num_heads:
        raise ValueError(f"x of shape {tuple(x.shape)} must be (B, T, D) with D divisible by "
                         f"num_heads={num_heads}")
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """Inverse of :func:`split_heads`: Concat(head_1, ..., head_h) along the features.

    Shape:
        x: (B, H, T, Dh) -> (B, T, H * Dh)
    """
    if x.dim() != 4:
        raise ValueError(f"x of shape {tuple(x.shape)} must be (B, H, T, Dh)")
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, H, Dh) -> (B, T, D); copies (not contiguous)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Give each of the H = Hkv * n_rep query heads its key/value head: head i gets x[:, i // n_rep].

    Shape:
        x: (B, Hkv, T, Dh) -> (B, Hkv * n_rep, T, Dh); x itself when n_rep = 1.
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        raise ValueError(f"x of shape {tuple(getattr(x, 'shape', ()))} must be (B, Hkv, T, Dh)")
    if isinstance(n_rep, bool) or not isinstance(n_rep, Integral) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive integer, got {n_rep!r}")
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)   # (B, Hkv, ...) -> (B, Hkv * n_rep, ...)


def multihead_macs(tq: int, tk: int, d_model: int, num_heads: int) -> dict[str, int]:
    """Multiply-accumulate operations of one multi-head attention call on one sequence (no batch).

    projections: Q (Tq D^2) + K, V (2 Tk D^2); scores: H Tq Tk Dh = Tq Tk D; weighted sum of values:
    Tq Tk D; output projection: Tq D^2. Every term is independent of H, because H * Dh = D.

    Shape:
        -> dict of Python ints; "total" is their sum.
    """
    for name, n in (("tq", tq), ("tk", tk), ("d_model", d_model), ("num_heads", num_heads)):
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    dh = d_model // num_heads
    out = {
        "projections": tq * d_model * d_model + 2 * tk * d_model * d_model,
        "scores": num_heads * tq * tk * dh,          # H matmuls (Tq, Dh) @ (Dh, Tk)
        "weighted_sum": num_heads * tq * tk * dh,    # H matmuls (Tq, Tk) @ (Tk, Dh)
        "output": tq * d_model * d_model,
    }
    out["total"] = sum(out.values())
    return out


def _check_mask(mask: Tensor, b: int, h: int, tq: int, tk: int) -> Tensor:
    """Accept (Tq, Tk) or 4-D (B|1, H|1, Tq, Tk) boolean masks; refuse ambiguous 3-D ones."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a torch.bool tensor (True = may attend), got {got}")
    if mask.dim() == 3:
        # (B, Tq, Tk) would broadcast B against the head axis: make the caller say which it is.
        raise ValueError(f"a 3-D mask of shape {tuple(mask.shape)} is ambiguous: pass (Tq, Tk) or "
                         f"(B, 1, Tq, Tk) (mask.unsqueeze(1)) or (B, H, Tq, Tk)")
    scores = (b, h, tq, tk)
    try:
        ok = mask.dim() in (2, 4) and torch.broadcast_shapes(mask.shape, scores) == scores
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                         f"(B, H, Tq, Tk) = {scores}; pass (Tq, Tk) or (B|1, H|1, Tq, Tk)")
    return mask


def _check_sizes(d_model, num_heads, dropout) -> tuple[int, int, int]:
    """(d_model, num_heads, d_head) as ints, or ValueError."""
    for name, n in (("d_model", d_model), ("num_heads", num_heads)):
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                         f"each head needs d_model / num_heads features")
    if isinstance(dropout, bool) or not isinstance(dropout, Real) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
    return int(d_model), int(num_heads), int(d_model) // int(num_heads)


def _check_inputs(d_model: int, query: Tensor, key: Tensor, value: Tensor) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} of shape {got} must be (B, T, d_model={d_model})")
    if key.shape != value.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must have one shape (B, Tk, d_model)")
    if query.size(0) != key.size(0):
        raise ValueError(f"query {tuple(query.shape)} and key {tuple(key.shape)} differ in batch size")


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with projections ``w_q``, ``w_k``, ``w_v``, ``w_o``.

    Each projection is ``nn.Linear(d_model, d_model)``; head i uses columns i*Dh ... (i+1)*Dh - 1
    of the projected features. Self-attention: ``mha(x, x, x)``; cross-attention: ``mha(y, x, x)``.
    Dropout (training mode only) acts on the attention weights before they mix the values; the
    returned weights are the softmax before dropout. A query with nothing to attend to gets zero
    weights, so its output row is the bias of ``w_o``.

    Shape:
        query: (B, Tq, D); key, value: (B, Tk, D);
        mask: torch.bool, True = may attend, (Tq, Tk) or (B|1, H|1, Tq, Tk)
        -> output (B, Tq, D), weights (B, H, Tq, Tk).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = _check_sizes(d_model, num_heads, dropout)
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # W^Q = [W_1^Q ... W_h^Q]
        self.w_k = nn.Linear(d_model, d_model, bias=bias)  # W^K = [W_1^K ... W_h^K]
        self.w_v = nn.Linear(d_model, d_model, bias=bias)  # W^V = [W_1^V ... W_h^V]
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.dropout = nn.Dropout(float(dropout))

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        _check_inputs(self.d_model, query, key, value)
        h = self.num_heads
        if mask is not None:
            mask = _check_mask(mask, query.size(0), h, query.size(1), key.size(1))
        q = split_heads(self.w_q(query), h)  # (B, Tq, D) -> (B, H, Tq, Dh)
        k = split_heads(self.w_k(key), h)    # (B, Tk, D) -> (B, H, Tk, Dh)
        v = split_heads(self.w_v(value), h)  # (B, Tk, D) -> (B, H, Tk, Dh)
        # All heads at once: batch dims (B, H); softmax(q k^T / sqrt(Dh)) per head.
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Tq, Dh), (B, H, Tq, Tk)
        if self.training and self.dropout.p > 0:
            heads = self.dropout(weights) @ v  # (B, H, Tq, Tk) @ (B, H, Tk, Dh) -> (B, H, Tq, Dh)
        return self.w_o(merge_heads(heads)), weights  # Concat(heads) W^O: (B, Tq, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_head={self.d_head}"

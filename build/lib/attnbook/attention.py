"""Scaled dot-product attention, its hand-written backward pass, and a single-head self-attention layer.

Shape legend: ``...`` any batch dimensions (e.g. B or B, H), Tq queries, Tk keys, D = d_k the
query/key size, Dv the value size. Vectors are rows: Q (Tq, D), K (Tk, D), V (Tk, Dv).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import Tensor, nn

from .softmax import masked_softmax, softmax

__all__ = [
    "scaled_dot_product_attention",
    "attention_backward",
    "ManualAttentionFunction",
    "manual_attention",
    "SelfAttention",
]


def _shape(x: Tensor) -> tuple:
    return tuple(x.shape)


def _check_inputs(q, k, v, mask, scale) -> tuple[float, torch.Size]:
    """Validate q, k, v, mask, scale; return (scale, shape of the scores (..., Tq, Tk))."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise ValueError(f"{name} has dtype {x.dtype}; attention needs floating-point tensors")
        if x.dim() < 2:
            raise ValueError(f"{name} of shape {_shape(x)} needs at least 2 dimensions (..., T, D)")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.size(-1) != k.size(-1):
        raise ValueError(f"q of shape {_shape(q)} and k of shape {_shape(k)} differ in their last "
                         f"dimension ({q.size(-1)} vs {k.size(-1)}); q·k needs the same D")
    if k.size(-2) != v.size(-2):
        raise ValueError(f"k of shape {_shape(k)} and v of shape {_shape(v)} hold different numbers "
                         f"of keys and values ({k.size(-2)} vs {v.size(-2)})")
    if q.size(-1) == 0 or k.size(-2) == 0:
        raise ValueError(f"q of shape {_shape(q)} and k of shape {_shape(k)}: need D >= 1 and Tk >= 1")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch dimensions of q {_shape(q)}, k {_shape(k)} and v {_shape(v)} "
                         f"do not broadcast together") from None
    scores_shape = batch + (q.size(-2), k.size(-2))  # (..., Tq, Tk)
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(f"mask must be a torch.bool tensor (True = may attend), got {got}")
        try:
            ok = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"mask of shape {_shape(mask)} does not broadcast to the scores' shape "
                             f"{tuple(scores_shape)} = (..., Tq, Tk)")
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    elif isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return float(scale), scores_shape


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T * scale) V, with an optional boolean mask.

    ``scale`` defaults to 1 / sqrt(D). ``mask`` is torch.bool, True = may attend; masked
    weights are exactly 0, and a query with nothing to attend to gets all-zero weights and a
    zero output (not nan, not a uniform average). Batch dimensions broadcast as in matmul.

    Formula: S = scale * Q K^T;  P = softmax_rows(S) over unmasked keys;  O = P V

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); v: (..., Tk, Dv); mask: broadcastable to (..., Tq, Tk)
        -> output (..., Tq, Dv), weights (..., Tq, Tk); the inputs' dtype and device.
    """
    scale, _ = _check_inputs(q, k, v, mask, scale)
    if mask is not None and mask.device != q.device:
        mask = mask.to(q.device)                      # e.g. causal_mask(n) built on the CPU
    scores = (q @ k.transpose(-2, -1)) * scale        # (..., Tq, D) @ (..., D, Tk) -> (..., Tq, Tk)
    weights = softmax(scores) if mask is None else masked_softmax(scores, mask)  # rows sum to 1 (or 0)
    return weights @ v, weights                       # (..., Tq, Tk) @ (..., Tk, Dv) -> (..., Tq, Dv)


def _sum_to(g: Tensor, shape: torch.Size) -> Tensor:
    """Undo broadcasting: sum g over the dimensions that were broadcast to reach g.shape."""
    extra = g.dim() - len(shape)
    if extra:
        g = g.sum(tuple(range(extra)))                # leading dims the input did not have
    dims = tuple(i for i, s in enumerate(shape) if s == 1 and g.size(i) != 1)
    return g.sum(dims, keepdim=True) if dims else g


def attention_backward(q: Tensor, k: Tensor, v: Tensor, grad_output: Tensor, mask: Tensor | None = None,
                       scale: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of scaled dot-product attention, by the explicit matrix formulas.

    P is recomputed from q and k (as FlashAttention does) instead of being stored.

    Formula (dX = dL/dX, c = scale, rows of P are softmax distributions):
        dV = P^T dO;   dP = dO V^T
        dS = P ⊙ (dP − rowsum(dP ⊙ P))      (per row: J^T dp with J = diag(p) − p p^T)
        dQ = c dS K;   dK = c dS^T Q
    Masked entries have P = 0 and so dS = 0; a fully masked row passes no gradient.

    Shape:
        q, k, v, mask as in :func:`scaled_dot_product_attention`; grad_output: (..., Tq, Dv)
        -> grad_q (like q), grad_k (like k), grad_v (like v).
    """
    out, p = scaled_dot_product_attention(q, k, v, mask, scale)   # p: (..., Tq, Tk)
    if not isinstance(grad_output, Tensor) or grad_output.shape != out.shape:
        got = _shape(grad_output) if isinstance(grad_output, Tensor) else type(grad_output).__name__
        raise ValueError(f"grad_output of shape {got} must have the output's shape {_shape(out)}")
    c = 1.0 / math.sqrt(q.size(-1)) if scale is None else float(scale)
    dO = grad_output.to(out.dtype)
    dV = p.transpose(-2, -1) @ dO                                   # (..., Tk, Tq) @ (..., Tq, Dv)
    dP = dO @ v.transpose(-2, -1)                                   # (..., Tq, Dv) @ (..., Dv, Tk)
    dS = p * (dP - (dP * p).sum(-1, keepdim=True))                  # softmax JVP, row by row
    dQ = c * (dS @ k)                                               # (..., Tq, Tk) @ (..., Tk, D)
    dK = c * (dS.transpose(-2, -1) @ q)                             # (..., Tk, Tq) @ (..., Tq, D)
    return _sum_to(dQ, q.shape), _sum_to(dK, k.shape), _sum_to(dV, v.shape)


class ManualAttentionFunction(torch.autograd.Function):
    """Scaled dot-product attention whose backward is :func:`attention_backward`.

    Used through :func:`manual_attention`. The backward is built from differentiable torch
    operations, so double backward (gradgradcheck) works too.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask=None, scale=None):
        out, _ = scaled_dot_product_attention(q, k, v, mask, scale)
        ctx.save_for_backward(q, k, v, mask)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_output):
        q, k, v, mask = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, grad_output, mask, ctx.scale)
        return dq, dk, dv, None, None  # no gradient for mask and scale


def manual_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                     scale: float | None = None) -> Tensor:
    """Attention output whose gradient comes from the hand-written :func:`attention_backward`.

    Shape:
        as :func:`scaled_dot_product_attention` -> output (..., Tq, Dv) only.
    """
    return ManualAttentionFunction.apply(q, k, v, mask, scale)


def _positive(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(n)


class SelfAttention(nn.Module):
    """Single-head self-attention: Q, K, V are projections of the same sequence X.

    Formula: Q = X W_Q + b_Q, K = X W_K + b_K, V = X W_V + b_V;
             Y = Attention(Q, K, V) W_O + b_O     (W as nn.Linear stores its transpose)

    ``d_k`` defaults to ``d_model`` and ``d_v`` to ``d_k``. A query with nothing to attend to
    gets a zero attention output, so its row of Y is the output bias b_O.

    Shape:
        x: (..., T, d_model); mask: broadcastable to (..., T, T)
        -> output (..., T, d_model), weights (..., T, T).
    """

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None, bias: bool = True):
        super().__init__()
        self.d_model = _positive(d_model, "d_model")
        self.d_k = self.d_model if d_k is None else _positive(d_k, "d_k")
        self.d_v = self.d_k if d_v is None else _positive(d_v, "d_v")
        self.q_proj = nn.Linear(self.d_model, self.d_k, bias=bias)
        self.k_proj = nn.Linear(self.d_model, self.d_k, bias=bias)
        self.v_proj = nn.Linear(self.d_model, self.d_v, bias=bias)
        self.out_proj = nn.Linear(self.d_v, self.d_model, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if not isinstance(x, Tensor) or x.dim() < 2 or x.size(-1) != self.d_model:
            got = _shape(x) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x of shape {got} must be (..., T, d_model={self.d_model})")
        q = self.q_proj(x)  # (..., T, d_k)
        k = self.k_proj(x)  # (..., T, d_k)
        v = self.v_proj(x)  # (..., T, d_v)
        out, weights = scaled_dot_product_attention(q, k, v, mask)  # (..., T, d_v), (..., T, T)
        return self.out_proj(out), weights                          # (..., T, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}"

"""Memory-efficient attention: online softmax, tiled (FlashAttention-style) attention, sparse patterns.

Shape legend: ``...`` batch dimensions (e.g. B, H), shared by q, k and v (no broadcasting);
Tq queries, Tk keys, D the query/key size, Dv the value size. Masks are torch.bool, True = may
attend (as :func:`attnbook.causal_mask`). ``causal`` means key j is visible to query i iff
j <= i, aligned at the top left as in ``F.scaled_dot_product_attention(is_causal=True)``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .attention import scaled_dot_product_attention
from .masks import causal_mask

__all__ = [
    "online_softmax_stats", "online_softmax", "tiled_attention", "TiledAttentionFunction",
    "tiled_attention_recompute", "sliding_window_mask", "strided_mask", "strided_attention",
]

_HALF = (torch.float16, torch.bfloat16)


def _positive_int(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(n)


def online_softmax_stats(x: Tensor, block_size: int = 1) -> tuple[Tensor, Tensor]:
    """Running max m and running sum l of exp(x - m) along the last dim, one block at a time.

    Formula (block b of the row, starting from m = -inf, l = 0):
        m' = max(m, max_j x_bj);   l' = l * exp(m - m') + sum_j exp(x_bj - m')
    At the end lse(x) = m + log l and softmax(x)_j = exp(x_j - m) / l. A row of only -inf keeps
    m = -inf and l = 0.

    Shape:
        x: (..., n) -> m (..., 1), l (..., 1)
    """
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() == 0 or x.size(-1) == 0:
        got = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a non-empty floating-point tensor, got {got}")
    block_size = _positive_int(block_size, "block_size")
    m = x.new_full((*x.shape[:-1], 1), -math.inf)       # (..., 1)
    l = x.new_zeros((*x.shape[:-1], 1))                 # (..., 1)
    for start in range(0, x.size(-1), block_size):
        blk = x[..., start:start + block_size]          # (..., b)
        m_new = torch.maximum(m, blk.amax(-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)  # nothing seen yet: any shift works
        l = l * torch.exp(m - m_safe) + torch.exp(blk - m_safe).sum(-1, keepdim=True)
        m = m_new
    return m, l


def online_softmax(x: Tensor, block_size: int = 1) -> Tensor:
    """Softmax along the last dim from the online statistics: one streaming pass, then normalise.

    Shape:
        x: (..., n) -> (..., n)
    """
    m, l = online_softmax_stats(x, block_size)
    return torch.exp(x - m) / l


def _check_qkv(q, k, v, block_size, window, scale) -> tuple[int, int | None, float]:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 2:
            got = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a floating-point tensor (..., T, D), got {got}")
    if not q.dtype == k.dtype == v.dtype or not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must share dtype and device, got {q.dtype}/{q.device}, "
                         f"{k.dtype}/{k.device}, {v.dtype}/{v.device}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} must have the "
                         f"same batch dimensions (...); expand them first")
    if q.size(-1) != k.size(-1) or k.size(-2) != v.size(-2):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: need q and k with "
                         f"the same D and k, v with the same number of keys")
    if q.size(-1) == 0 or k.size(-2) == 0:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)}: need D >= 1 and Tk >= 1")
    block_size = _positive_int(block_size, "block_size")
    window = None if window is None else _positive_int(window, "window")
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    elif isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return block_size, window, float(scale)


def _key_range(qs: int, qe: int, tk: int, causal: bool, window: int | None) -> tuple[int, int]:
    """Keys [lo, hi) that at least one query of [qs, qe) may see: everything else is skipped."""
    lo, hi = 0, tk
    if causal:
        hi = min(hi, qe)                          # j <= i <= qe - 1
    if window is not None:
        lo = max(lo, qs - window + 1)             # j > i - window
        if not causal:
            hi = min(hi, qe - 1 + window)         # j < i + window
    return lo, hi


def _block_mask(qs, qe, ks, ke, causal, window, device) -> Tensor | None:
    """Allowed pairs of a (qe-qs, ke-ks) tile, or None when the whole tile is allowed."""
    whole = (not causal or ke - 1 <= qs) and (
        window is None or (ks >= qe - window and (causal or ke <= qs + window)))
    if whole:
        return None
    i = torch.arange(qs, qe, device=device)[:, None]   # (bq, 1) query positions
    j = torch.arange(ks, ke, device=device)[None, :]   # (1, bk) key positions
    ok = (j <= i) if causal else torch.ones_like(i == j)
    if window is not None:
        ok = ok & (i - j < window) & (j - i < window)
    return ok                                           # (bq, bk)


def _tiled_forward(q, k, v, block_size, causal, window, scale) -> tuple[Tensor, Tensor]:
    """Output and per-row logsumexp (+inf for a query that sees no key); differentiable by autograd."""
    acc = torch.float32 if q.dtype in _HALF else q.dtype   # statistics in fp32 for half inputs
    batch, tq, tk = q.shape[:-2], q.size(-2), k.size(-2)
    out = q.new_empty(*batch, tq, v.size(-1))              # (..., Tq, Dv)
    lse = q.new_empty(*batch, tq, dtype=acc)               # (..., Tq)
    for qs in range(0, tq, block_size):
        qe = min(qs + block_size, tq)
        qb = q[..., qs:qe, :] * scale                      # (..., bq, D)
        m = q.new_full((*batch, qe - qs, 1), -math.inf, dtype=acc)  # running max    (..., bq, 1)
        l = q.new_zeros((*batch, qe - qs, 1), dtype=acc)            # running sum    (..., bq, 1)
        o = q.new_zeros((*batch, qe - qs, v.size(-1)), dtype=acc)   # unnormalised O (..., bq, Dv)
        lo, hi = _key_range(qs, qe, tk, causal, window)
        for ks in range(lo - lo % block_size, hi, block_size):    # key tiles on the block grid
            ke = min(ks + block_size, hi)
            s = (qb @ k[..., ks:ke, :].transpose(-2, -1)).to(acc)   # (..., bq, D) @ (..., D, bk)
            allowed = _block_mask(qs, qe, ks, ke, causal, window, q.device)
            if allowed is not None:
                s = s.masked_fill(~allowed, -math.inf)
            m_new = torch.maximum(m, s.detach().amax(-1, keepdim=True))  # the shift cancels exactly
            m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)
            p = torch.exp(s - m_safe)                                 # (..., bq, bk); masked -> 0
            corr = torch.exp(m - m_safe)                              # rescale the old block sums
            l = l * corr + p.sum(-1, keepdim=True)
            o = o * corr + (p.to(v.dtype) @ v[..., ks:ke, :]).to(acc)  # (..., bq, bk) @ (..., bk, Dv)
            m = m_new
        seen = l > 0
        out[..., qs:qe, :] = (o / torch.where(seen, l, 1.0)).to(out.dtype)   # no key -> o = 0
        lse[..., qs:qe] = torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)),
                                      math.inf).squeeze(-1).detach()
    return out, lse


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, block_size: int = 128, causal: bool = False,
                    window: int | None = None, scale: float | None = None) -> Tensor:
    """FlashAttention-style forward: softmax(q k^T * scale) v one (block, block) tile at a time.

    Never materialises the (Tq, Tk) score matrix: per query block it keeps the running max,
    the running sum and an unnormalised output, rescaled as new key blocks arrive (online
    softmax). Key blocks no query may see are skipped (``causal``: keys j > i; ``window``: keys
    with |i - j| >= window, or i - j >= window when causal). Any Tq, Tk, block_size. A query
    that sees no key gets a zero output. Autograd works but stores every tile; see
    :func:`tiled_attention_recompute` for linear-memory training.

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); v: (..., Tk, Dv) -> output (..., Tq, Dv)
    """
    block_size, window, scale = _check_qkv(q, k, v, block_size, window, scale)
    return _tiled_forward(q, k, v, block_size, bool(causal), window, scale)[0]


class TiledAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward recomputes each tile from q, k and the saved logsumexp.

    Saved for backward: q, k, v, the output and one logsumexp per query, i.e. O(T) memory.
    Formula (per tile, L the row's logsumexp, scale = 1/sqrt(d_k) by default, Δ_i = sum_d dO_id O_id):
        P = exp(scale · q k^T - L);  dV += P^T dO;  dP = dO V^T;  dS = P ⊙ (dP - Δ)
        dQ += scale · dS K;  dK += scale · dS^T Q
    """

    @staticmethod
    def forward(ctx, q, k, v, block_size, causal, window, scale):
        out, lse = _tiled_forward(q, k, v, block_size, causal, window, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = (block_size, causal, window, scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        block_size, causal, window, scale = ctx.config
        acc = torch.float32 if q.dtype in _HALF else q.dtype
        q32, k32, v32, do = (t.to(acc) for t in (q, k, v, grad_out))
        delta = (do * out.to(acc)).sum(-1, keepdim=True)        # (..., Tq, 1) = rowsum(dP ⊙ P)
        dq, dk, dv = torch.zeros_like(q32), torch.zeros_like(k32), torch.zeros_like(v32)
        tq, tk = q.size(-2), k.size(-2)
        for qs in range(0, tq, block_size):
            qe = min(qs + block_size, tq)
            qb, dob = q32[..., qs:qe, :], do[..., qs:qe, :]     # (..., bq, D), (..., bq, Dv)
            lb, db = lse[..., qs:qe, None], delta[..., qs:qe, :]  # (..., bq, 1) each
            lo, hi = _key_range(qs, qe, tk, causal, window)
            for ks in range(lo - lo % block_size, hi, block_size):
                ke = min(ks + block_size, hi)
                kb, vb = k32[..., ks:ke, :], v32[..., ks:ke, :]
                s = (qb @ kb.transpose(-2, -1)) * scale          # (..., bq, bk), recomputed
                allowed = _block_mask(qs, qe, ks, ke, causal, window, q.device)
                if allowed is not None:
                    s = s.masked_fill(~allowed, -math.inf)
                p = torch.exp(s - lb)                            # exact softmax weights of the tile
                dv[..., ks:ke, :] += p.transpose(-2, -1) @ dob   # (..., bk, bq) @ (..., bq, Dv)
                ds = p * (dob @ vb.transpose(-2, -1) - db)       # (..., bq, bk)
                dq[..., qs:qe, :] += ds @ kb                     # (..., bq, bk) @ (..., bk, D)
                dk[..., ks:ke, :] += ds.transpose(-2, -1) @ qb   # (..., bk, bq) @ (..., bq, D)
        return (dq * scale).to(q.dtype), (dk * scale).to(k.dtype), dv.to(v.dtype), None, None, None, None


def tiled_attention_recompute(q: Tensor, k: Tensor, v: Tensor, block_size: int = 128,
                              causal: bool = False, window: int | None = None,
                              scale: float | None = None) -> Tensor:
    """:func:`tiled_attention` with a backward pass in O(T) memory (:class:`TiledAttentionFunction`).

    Shape:
        as :func:`tiled_attention` -> output (..., Tq, Dv)
    """
    block_size, window, scale = _check_qkv(q, k, v, block_size, window, scale)
    return TiledAttentionFunction.apply(q, k, v, block_size, bool(causal), window, scale)


def sliding_window_mask(n: int, window: int, causal: bool = True,
                        device: torch.device | str | None = None) -> Tensor:
    """Local attention: query i sees the keys within ``window`` positions of it.

    Formula: M_ij = (0 <= i - j < window) if causal else (|i - j| < window)

    Shape:
        -> (n, n) torch.bool
    """
    window = _positive_int(window, "window")
    i = torch.arange(_nonneg(n), device=device)
    d = i[:, None] - i[None, :]                          # (n, n): i - j
    return ((d >= 0) & (d < window)) if causal else (d.abs() < window)


def strided_mask(n: int, stride: int, causal: bool = True,
                 device: torch.device | str | None = None) -> Tensor:
    """Strided pattern (Child et al., 2019): query i sees every ``stride``-th key, j ≡ i (mod stride).

    Together with ``sliding_window_mask(n, stride)`` (OR) it gives their "strided" attention.

    Formula: M_ij = ((i - j) mod stride == 0) and (j <= i if causal)

    Shape:
        -> (n, n) torch.bool
    """
    stride = _positive_int(stride, "stride")
    i = torch.arange(_nonneg(n), device=device)
    d = i[:, None] - i[None, :]                          # (n, n): i - j
    ok = d.remainder(stride) == 0
    return ok & (d >= 0) if causal else ok


def _nonneg(n) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return int(n)


def strided_attention(q: Tensor, k: Tensor, v: Tensor, stride: int, causal: bool = True,
                      scale: float | None = None) -> Tensor:
    """Attention restricted to :func:`strided_mask`, in O(T^2 / stride) time and memory.

    Positions with the same residue mod ``stride`` form ``stride`` short sequences of length
    C = ceil(T / stride); each is attended separately (a reshape, no (T, T) mask).

    Shape:
        q, k: (..., T, D); v: (..., T, Dv) -> (..., T, Dv)
    """
    _, _, scale = _check_qkv(q, k, v, 1, None, scale)
    stride = _positive_int(stride, "stride")
    t = q.size(-2)
    if k.size(-2) != t:
        raise ValueError(f"strided attention is self-attention: q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)} need the same T")
    c = -(-t // stride)                                  # C = ceil(T / stride)
    pad = c * stride - t

    def split(x: Tensor) -> Tensor:                      # (..., T, E) -> (..., stride, C, E)
        x = torch.nn.functional.pad(x, (0, 0, 0, pad))   # (..., C * stride, E)
        return x.unflatten(-2, (c, stride)).transpose(-3, -2)

    pos = torch.arange(c * stride, device=q.device).view(c, stride).T   # (stride, C): position
    mask = (pos < t)[:, None, :]                                          # (stride, 1, C): real keys
    if causal:
        mask = mask & causal_mask(c, device=q.device)                     # (stride, C, C)
    out, _ = scaled_dot_product_attention(split(q), split(k), split(v), mask, scale)  # (..., stride, C, Dv)
    return out.transpose(-3, -2).flatten(-3, -2)[..., :t, :]             # (..., T, Dv)

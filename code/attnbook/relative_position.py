"""Relative position: Shaw et al. (2018), Transformer-XL (Dai et al., 2019), T5's bucketed bias
(Raffel et al., 2020) and ALiBi (Press et al., 2022).

One convention throughout: the relative position of key j seen from query i is ``j - i``
(negative = the key lies in the past). Transformer-XL writes R_{i-j}; ALiBi penalises i - j.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .positional import _check_int
from .softmax import masked_softmax, softmax

__all__ = [
    "relative_positions",
    "clipped_relative_index",
    "shaw_scores",
    "ShawRelativeKeys",
    "transformer_xl_score_terms",
    "t5_relative_position_bucket",
    "T5RelativeBias",
    "alibi_slopes",
    "alibi_bias",
    "attention_with_bias",
]


def relative_positions(tq: int, tk: int | None = None, device=None) -> Tensor:
    """rel[i, j] = j - i for queries i = 0 .. tq-1 and keys j = 0 .. tk-1 (tk defaults to tq).

    Shape:
        -> (tq, tk), int64
    """
    tk = tq if tk is None else tk
    _check_int(tq, "tq", 0)
    _check_int(tk, "tk", 0)
    return torch.arange(tk, device=device).unsqueeze(0) - torch.arange(tq, device=device).unsqueeze(1)


def clipped_relative_index(tq: int, tk: int, max_distance: int, device=None) -> Tensor:
    """Row of Shaw et al.'s table for each (i, j): clip(j - i, -k_max, k_max) + k_max, k_max = max_distance.

    Every distance beyond k_max shares the row of distance k_max (the paper's k; Shaw et al. used 16, and
    values >= 2 barely mattered).

    Shape:
        -> (tq, tk), int64 in [0, 2 k_max]
    """
    _check_int(max_distance, "max_distance", 0)
    rel = relative_positions(tq, tk, device)  # (tq, tk)
    return rel.clamp(-max_distance, max_distance) + max_distance


def shaw_scores(q: Tensor, k: Tensor, rel_keys: Tensor, scale: float | None = None) -> Tensor:
    """Attention scores with relative key embeddings (Shaw et al., 2018, eq. 5).

    Formula: e_ij = q_i · (k_j + a_ij) * scale,  a_ij = w_{clip(j-i, -k_max, k_max)},  scale = 1/sqrt(D)

    ``rel_keys`` holds a_ij for every (i, j), e.g. from :class:`ShawRelativeKeys`; it is shared
    across the batch and heads, and q_i · a_ij is an einsum, not a (Tq, Tk, D) copy of k.

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); rel_keys: (Tq, Tk, D) -> (..., Tq, Tk)
    """
    if q.size(-1) != k.size(-1) or rel_keys.shape != (q.size(-2), k.size(-2), q.size(-1)):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} need rel_keys of shape "
                         f"(Tq, Tk, D) = {(q.size(-2), k.size(-2), q.size(-1))}, got {tuple(rel_keys.shape)}")
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    content = q @ k.transpose(-2, -1)  # (..., Tq, Tk)
    position = torch.einsum("...id,ijd->...ij", q, rel_keys)  # (..., Tq, Tk)
    return (content + position) * scale


class ShawRelativeKeys(nn.Module):
    """The learned table w_{-k_max} .. w_{k_max} of Shaw et al. (2018), looked up for each (i, j).

    Shape:
        forward(tq, tk) -> (tq, tk, head_dim); weight: (2K + 1, head_dim)
    """

    def __init__(self, max_distance: int, head_dim: int):
        super().__init__()
        self.max_distance = _check_int(max_distance, "max_distance", 0)
        self.weight = nn.Parameter(torch.randn(2 * max_distance + 1, _check_int(head_dim, "head_dim", 1)) * 0.02)

    def forward(self, tq: int, tk: int) -> Tensor:
        idx = clipped_relative_index(tq, tk, self.max_distance, self.weight.device)  # (tq, tk)
        return self.weight[idx]  # (tq, tk, head_dim)


def transformer_xl_score_terms(q: Tensor, k: Tensor, r: Tensor, u: Tensor, v: Tensor
                               ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four terms of a Transformer-XL attention score (Dai et al., 2019, sec. 3.3).

    With q_i = W_q E_i, k_j = W_{k,E} E_j and r_ij = W_{k,R} R_{i-j} (R a sinusoid of i - j):

        A_ij = q_i·k_j  (a) content-content  +  q_i·r_ij  (b) content-position
             + u·k_j    (c) global content   +  v·r_ij    (d) global position

    u and v are learned vectors that replace the query's absolute-position part. The sum equals
    (q_i + u)·k_j + (q_i + v)·r_ij. No 1/sqrt(D) scaling is applied here.

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); r: (Tq, Tk, D); u, v: (D,) or (..., 1, D) (e.g. per head)
        -> four tensors of the common shape (..., Tq, Tk)
    """
    if r.shape != (q.size(-2), k.size(-2), q.size(-1)):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} need r of shape "
                         f"(Tq, Tk, D) = {(q.size(-2), k.size(-2), q.size(-1))}, got {tuple(r.shape)}")
    u = u.unsqueeze(0) if u.dim() == 1 else u  # (..., 1, D)
    v = v.unsqueeze(0) if v.dim() == 1 else v  # (..., 1, D)
    a = q @ k.transpose(-2, -1)  # (..., Tq, Tk)
    b = torch.einsum("...id,ijd->...ij", q, r)  # (..., Tq, Tk)
    c = u @ k.transpose(-2, -1)  # (..., 1, Tk): the same for every query
    d = torch.einsum("...xd,ijd->...ij", v, r)  # (..., Tq, Tk); x is the size-1 query axis
    a, b, c, d = torch.broadcast_tensors(a, b, c, d)
    return a, b, c, d


def t5_relative_position_bucket(relative_position: Tensor, bidirectional: bool = True,
                                num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bucket of each relative position j - i (Raffel et al., 2020; as in the T5/Mesh TF code).

    Bidirectional: half the buckets for keys after the query (j > i), half for keys at or before.
    Causal (``bidirectional=False``): all buckets for the past, n = max(i - j, 0); future keys
    get bucket 0 (a causal mask hides them anyway). Within each half of size nb, with
    max_exact = nb // 2:

        n <  max_exact:  bucket n (one bucket per distance)
        n >= max_exact:  max_exact + floor(log(n / max_exact) / log(max_distance / max_exact)
                                           * (nb - max_exact)),  capped at nb - 1

    so distances from max_distance on share the last bucket.

    Shape:
        relative_position: (...) integer -> (...) int64 in [0, num_buckets)
    """
    if not isinstance(relative_position, Tensor) or relative_position.is_floating_point():
        got = relative_position.dtype if isinstance(relative_position, Tensor) else type(relative_position).__name__
        raise ValueError(f"relative_position must be an integer tensor of j - i, got {got}")
    _check_int(num_buckets, "num_buckets", 4 if bidirectional else 2)
    nb = num_buckets // 2 if bidirectional else num_buckets
    max_exact = nb // 2
    if not (isinstance(max_distance, int) and max_distance > max_exact):
        raise ValueError(f"max_distance must be an integer > {max_exact} (the distances with a bucket "
                         f"of their own), got {max_distance!r}")
    rel = relative_position.long()
    if bidirectional:
        offset = (rel > 0).long() * nb  # keys after the query use the upper half
        n = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        n = (-rel).clamp(min=0)  # distance into the past
    # float32 log as the reference code; clamp so log never sees 0 (those n use the exact branch).
    log_ratio = torch.log(n.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (nb - max_exact)).long()).clamp(max=nb - 1)
    return offset + torch.where(n < max_exact, n, large)


class T5RelativeBias(nn.Module):
    """A learned scalar per (bucket, head), added to the attention scores (T5).

    Shape:
        forward(tq, tk) -> (H, tq, tk); weight: (num_buckets, H)
    """

    def __init__(self, num_heads: int, bidirectional: bool = True, num_buckets: int = 32,
                 max_distance: int = 128):
        super().__init__()
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        t5_relative_position_bucket(torch.zeros(1, dtype=torch.long), bidirectional, num_buckets, max_distance)
        self.bias = nn.Embedding(num_buckets, _check_int(num_heads, "num_heads", 1))

    def forward(self, tq: int, tk: int) -> Tensor:
        rel = relative_positions(tq, tk, self.bias.weight.device)  # (tq, tk)
        buckets = t5_relative_position_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        return self.bias(buckets).permute(2, 0, 1)  # (tq, tk, H) -> (H, tq, tk)


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi head slopes (Press et al., 2022, and their reference code).

    For H a power of two: the geometric sequence s_h = 2^(-8h/H), h = 1 .. H (8 heads: 1/2 .. 1/256;
    the paper writes the slope m). Otherwise, with p the largest power of two below H: the p slopes for
    p heads, then every other slope of the 2p-head sequence, 2^(-4/p), 2^(-12/p), ..., until H are listed.

    Shape:
        -> (num_heads,), float64
    """
    _check_int(num_heads, "num_heads", 1)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(p) + power_of_two(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(num_heads: int, tq: int, tk: int | None = None, device=None,
               dtype: torch.dtype = torch.float32) -> Tensor:
    """ALiBi's fixed linear penalty -s_h |i - j| added to the scores of head h (s_h: the head's slope).

    With a causal mask (the paper's setting: j <= i) this is -s_h (i - j). Without one it is the
    symmetric variant, which cannot tell left from right.

    Shape:
        -> (num_heads, tq, tk)
    """
    distance = relative_positions(tq, tk, device).abs().to(dtype)  # (tq, tk)
    slopes = alibi_slopes(num_heads).to(device=device, dtype=dtype)  # (H,)
    return -slopes.view(-1, 1, 1) * distance  # (H, 1, 1) * (tq, tk) -> (H, tq, tk)


def attention_with_bias(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, mask: Tensor | None = None,
                        scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention with an additive score bias (T5, ALiBi): softmax(QK^T s + bias) V.

    The bias shifts the scores before the softmax; the boolean mask (True = may attend) removes
    keys exactly as in :func:`attnbook.scaled_dot_product_attention`.

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); v: (..., Tk, Dv); bias, mask: broadcastable to (..., Tq, Tk)
        -> output (..., Tq, Dv), weights (..., Tq, Tk)
    """
    if q.size(-1) != k.size(-1) or k.size(-2) != v.size(-2):
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: need q, k with "
                         "the same D and k, v with the same Tk")
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    try:
        scores = scores + bias  # bias must broadcast to the scores, not enlarge them
        ok = scores.shape[-2:] == (q.size(-2), k.size(-2))
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to scores (..., "
                         f"{q.size(-2)}, {k.size(-2)})")
    weights = softmax(scores) if mask is None else masked_softmax(scores, mask)  # (..., Tq, Tk)
    return weights @ v, weights  # (..., Tq, Dv)

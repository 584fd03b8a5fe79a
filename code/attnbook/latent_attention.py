"""Multi-head latent attention (MLA, DeepSeek-V2/V3): cache one small latent per token instead of K and V.

Each token h is compressed to a latent c = RMSNorm(h W_DKV) of width r (kv_rank), shared by all heads;
head h's keys and values are read back from it: K^C_h = c W_UK_h (width d_n), V_h = c W_UV_h (width d_v).
RoPE cannot act on c W_UK (a rotation between c and W_UK would depend on the position), so a separate
small key k^R = RoPE(h W_KR) of width d_r, shared by all heads, carries the position; each head's query
has a matching RoPE part q^R_h. Scores: s_h = (q^C_h . K^C_h + q^R_h . k^R) / sqrt(d_n + d_r).
The decoding cache holds only c and k^R: (r + d_r) numbers per token and layer.

Absorbed form (for decoding): q^C_h . (c W_UK_h) = (q^C_h W_UK_h^T) . c, so the query moves into the latent
space and the heads attend to c itself (one shared key/value "head", like MQA); likewise
softmax(s) (c W_UV_h) = (softmax(s) c) W_UV_h, applied just before the output projection (W_UV_h W_O_h
may be pre-multiplied). K and V are never materialised. Shapes batch first: (B, H, T, D).
"""

from __future__ import annotations

import math
from numbers import Integral

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .kv_cache import KVCache
from .positional import apply_rotary

__all__ = [
    "split_kv_up",
    "mla_attention",
    "mla_absorbed_attention",
    "absorb_projections",
    "mla_decode_flops",
    "kv_cache_bytes_per_token",
    "MultiHeadLatentAttention",
]


def _pos(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(n)


def split_kv_up(weight: Tensor, num_heads: int, nope_dim: int, v_dim: int) -> tuple[Tensor, Tensor]:
    """Per-head W_UK and W_UV from the up-projection weight (nn.Linear layout, head by head [k (d_n), v (d_v)]).

    Shape:
        weight: (H (d_n + d_v), r) -> W_UK (H, r, d_n), W_UV (H, r, d_v)
    """
    if not isinstance(weight, Tensor) or weight.dim() != 2 or weight.size(0) != num_heads * (nope_dim + v_dim):
        got = tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
        raise ValueError(f"weight of shape {got} must be (H (d_n + d_v), r) = ({num_heads * (nope_dim + v_dim)}, r)")
    w = weight.view(num_heads, nope_dim + v_dim, weight.size(1))       # (H, d_n + d_v, r)
    return w[:, :nope_dim].transpose(1, 2), w[:, nope_dim:].transpose(1, 2)


def _check(q_nope, q_rope, c, k_rope, w_uk, w_uv) -> None:
    for name, x in (("q_nope", q_nope), ("q_rope", q_rope), ("c", c), ("k_rope", k_rope), ("w_uk", w_uk),
                    ("w_uv", w_uv)):
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {type(x).__name__}")
    if q_nope.dim() != 4:
        raise ValueError(f"q_nope of shape {tuple(q_nope.shape)} must be (B, H, Tq, d_n)")
    B, H, Tq, dn = q_nope.shape
    ok = (q_rope.shape[:3] == (B, H, Tq) and c.dim() == 3 and c.size(0) == B and k_rope.shape[:2] == c.shape[:2]
          and k_rope.size(2) == q_rope.size(3) and w_uk.shape == (H, c.size(2), dn)
          and w_uv.dim() == 3 and w_uv.shape[:2] == (H, c.size(2)))
    if not ok:
        raise ValueError(f"expected q_nope (B, H, Tq, d_n), q_rope (B, H, Tq, d_r), c (B, Tk, r), k_rope (B, Tk, d_r), "
                         f"W_UK (H, r, d_n), W_UV (H, r, d_v); got {tuple(q_nope.shape)}, {tuple(q_rope.shape)}, "
                         f"{tuple(c.shape)}, {tuple(k_rope.shape)}, {tuple(w_uk.shape)}, {tuple(w_uv.shape)}")


def mla_attention(q_nope: Tensor, q_rope: Tensor, c: Tensor, k_rope: Tensor, w_uk: Tensor, w_uv: Tensor,
                  mask: Tensor | None = None, scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Naive MLA: expand the latents to per-head keys and values, then ordinary attention.

    Formula: K_h = [c W_UK_h, k^R];  V_h = c W_UV_h;  O_h = softmax([q^C_h, q^R_h] K_h^T * scale) V_h,
             scale = 1 / sqrt(d_n + d_r) by default

    Shape:
        q_nope: (B, H, Tq, d_n); q_rope: (B, H, Tq, d_r); c: (B, Tk, r); k_rope: (B, Tk, d_r);
        w_uk: (H, r, d_n); w_uv: (H, r, d_v); mask: broadcastable to (B, H, Tq, Tk)
        -> output (B, H, Tq, d_v), weights (B, H, Tq, Tk)
    """
    _check(q_nope, q_rope, c, k_rope, w_uk, w_uv)
    H = q_nope.size(1)
    k_nope = c.unsqueeze(1) @ w_uk                                   # (B, 1, Tk, r) @ (H, r, d_n) -> (B, H, Tk, d_n)
    v = c.unsqueeze(1) @ w_uv                                        # (B, H, Tk, d_v)
    k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(-1, H, -1, -1)], -1)   # (B, H, Tk, d_n + d_r)
    q = torch.cat([q_nope, q_rope], -1)                              # (B, H, Tq, d_n + d_r)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    return scaled_dot_product_attention(q, k, v, mask, scale)


def mla_absorbed_attention(q_nope: Tensor, q_rope: Tensor, c: Tensor, k_rope: Tensor, w_uk: Tensor,
                           w_uv: Tensor, mask: Tensor | None = None,
                           scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Absorbed MLA: queries move into the latent space; all heads attend to [c, k^R] and read c.

    Formula: q~_h = [q^C_h W_UK_h^T, q^R_h];  P_h = softmax(q~_h [c, k^R]^T * scale);  O_h = (P_h c) W_UV_h
    (equal to :func:`mla_attention`; scale = 1 / sqrt(d_n + d_r), not 1 / sqrt(r + d_r))

    Shape:
        as :func:`mla_attention` -> output (B, H, Tq, d_v), weights (B, H, Tq, Tk)
    """
    _check(q_nope, q_rope, c, k_rope, w_uk, w_uv)
    scale = 1 / math.sqrt(q_nope.size(-1) + q_rope.size(-1)) if scale is None else scale
    q = torch.cat([q_nope @ w_uk.transpose(1, 2), q_rope], -1)      # (B, H, Tq, d_n) @ (H, d_n, r) -> (B, H, Tq, r + d_r)
    k = torch.cat([c, k_rope], -1).unsqueeze(1)                      # (B, 1, Tk, r + d_r): one key head for all
    o_latent, weights = scaled_dot_product_attention(q, k, c.unsqueeze(1), mask, scale)   # (B, H, Tq, r)
    return o_latent @ w_uv, weights                                  # (B, H, Tq, r) @ (H, r, d_v) -> (B, H, Tq, d_v)


def absorb_projections(layer: "MultiHeadLatentAttention") -> tuple[Tensor, Tensor]:
    """Fold W_UK into the query projection and W_UV into the output projection of an MLA layer.

    Formula: q^C_h W_UK_h^T = u (W_Q^C_h^T W_UK_h^T) -> per head W_QL_h = W_UK_h W_Q^C_h (nn.Linear layout),
             sum_h (P_h c) W_UV_h W_O_h  -> W_OL[:, h] = (W_UV_h W_O_h)^T
    u is the input of the last query projection (x, or q_norm(q_down(x)) with ``q_rank``). Decoding then
    needs only c and k^R; the folded output costs H r d_model multiply-adds per token (against
    H r d_v + H d_v d_model when W_UV is applied first).

    Shape:
        -> W_QL (H, r, d_in), d_in = d_model or q_rank; W_OL (d_model, H r)
    """
    H, dn, dr, dv = layer.num_heads, layer.nope_dim, layer.rope_dim, layer.v_dim
    q_lin = layer.q_proj if hasattr(layer, "q_proj") else layer.q_up
    w_q = q_lin.weight.view(H, dn + dr, -1)[:, :dn]                     # (H, d_n, d_in): W_Q^C per head
    w_uk, w_uv = split_kv_up(layer.kv_up.weight, H, dn, dv)            # (H, r, d_n), (H, r, d_v)
    w_o = layer.out_proj.weight.view(layer.d_model, H, dv)             # (d_model, H, d_v)
    w_ol = torch.einsum("hrv,mhv->mhr", w_uv, w_o)                      # (d_model, H, r)
    return w_uk @ w_q, w_ol.reshape(layer.d_model, H * layer.kv_rank)


def mla_decode_flops(num_heads: int, nope_dim: int, rope_dim: int, v_dim: int, kv_rank: int,
                     tokens: int) -> dict[str, int]:
    """FLOPs (2 x multiply-adds) of one decoded query over ``tokens`` cached latents, per layer and sequence.

    Counts the matmuls of :func:`mla_attention` / :func:`mla_absorbed_attention` (projections of the new
    token, shared by both, are left out; softmax is not a matmul). With H heads, t tokens:
        naive:    expand K^C and V from every cached c: H t r (d_n + d_v); scores H t (d_n + d_r); P V: H t d_v
        absorbed: q^C W_UK^T: H d_n r;  scores H t (r + d_r);  P c: H t r;  (P c) W_UV: H r d_v
    Naive grows with t r (d_n + d_v) per head, absorbed with t (2r + d_r).

    Shape:
        -> {"naive": int, "absorbed": int}
    """
    H, dn, dr, dv, r, t = (_pos(num_heads, "num_heads"), _pos(nope_dim, "nope_dim"), _pos(rope_dim, "rope_dim"),
                           _pos(v_dim, "v_dim"), _pos(kv_rank, "kv_rank"), _pos(tokens, "tokens"))
    naive = H * t * r * (dn + dv) + H * t * (dn + dr) + H * t * dv
    absorbed = H * dn * r + H * t * (r + dr) + H * t * r + H * r * dv
    return {"naive": 2 * naive, "absorbed": 2 * absorbed}


def kv_cache_bytes_per_token(num_heads: int, head_dim: int, num_kv_heads: int, kv_rank: int, rope_dim: int,
                             dtype: torch.dtype = torch.bfloat16, tokens: int = 16) -> dict[str, dict[str, int]]:
    """Cache bytes per token and layer for MHA, GQA, MQA and MLA: measured and by formula.

    Measured: fill a :class:`KVCache` of ``tokens`` slots with each method's tensors and divide the storage
    behind them (``untyped_storage().nbytes()``) by the tokens. MLA stores c and k^R as a one-"head" cache.
    Formula (s = bytes per number): MHA 2 H d_k s; GQA 2 H_kv d_k s; MQA 2 d_k s; MLA (r + d_r) s.

    Shape:
        -> {"MHA" | "GQA" | "MQA" | "MLA": {"measured": int, "formula": int}}
    """
    H, dk, Hkv = _pos(num_heads, "num_heads"), _pos(head_dim, "head_dim"), _pos(num_kv_heads, "num_kv_heads")
    r, dr, t = _pos(kv_rank, "kv_rank"), _pos(rope_dim, "rope_dim"), _pos(tokens, "tokens")
    if H % Hkv:
        raise ValueError(f"num_heads={H} must be a multiple of num_kv_heads={Hkv}")
    s = torch.empty((), dtype=dtype).element_size()
    layouts = {"MHA": (H, dk, dk, 2 * H * dk * s), "GQA": (Hkv, dk, dk, 2 * Hkv * dk * s),
               "MQA": (1, dk, dk, 2 * dk * s), "MLA": (1, r, dr, (r + dr) * s)}   # (heads, key width, value width)
    out = {}
    for name, (h, dkey, dval, formula) in layouts.items():
        cache = KVCache(max_len=t)
        cache.append(torch.zeros(1, h, t, dkey, dtype=dtype), torch.zeros(1, h, t, dval, dtype=dtype))
        out[name] = {"measured": cache.allocated_nbytes() // t, "formula": formula}
    return out


class MultiHeadLatentAttention(nn.Module):
    """MLA layer (DeepSeek-V2/V3 attention) with an optional latent cache; causal.

    Parameters as transformers' ``DeepseekV3Attention`` (names in brackets): q_proj, or q_down -> q_norm -> q_up
    when ``q_rank`` is set (q_a_proj, q_a_layernorm, q_b_proj); kv_down (kv_a_proj_with_mqa) giving [c, k^R];
    kv_norm (kv_a_layernorm); kv_up (kv_b_proj) holding W_UK and W_UV; out_proj (o_proj). No biases.
    RoPE pairs adjacent features (as DeepSeek's interleaved layout). ``cache`` is a :class:`KVCache` whose
    "keys" are c (B, 1, T, r) and "values" k^R (B, 1, T, d_r); ``absorbed`` picks the computation, not the result.

    Shape:
        x: (B, T, d_model) -> output (B, T, d_model), weights (B, H, T, T_cache + T)
    """

    def __init__(self, d_model: int, num_heads: int, kv_rank: int, nope_dim: int, rope_dim: int, v_dim: int,
                 q_rank: int | None = None, rope_base: float = 10000.0, scale: float | None = None,
                 eps: float = 1e-6):
        super().__init__()
        self.d_model, self.num_heads = _pos(d_model, "d_model"), _pos(num_heads, "num_heads")
        self.kv_rank, self.nope_dim, self.v_dim = _pos(kv_rank, "kv_rank"), _pos(nope_dim, "nope_dim"), _pos(v_dim, "v_dim")
        self.rope_dim = _pos(rope_dim, "rope_dim")
        if self.rope_dim % 2:
            raise ValueError(f"rope_dim={rope_dim} must be even (RoPE rotates pairs)")
        self.rope_base = rope_base
        self.scale = 1 / math.sqrt(nope_dim + rope_dim) if scale is None else scale
        H, dq = self.num_heads, nope_dim + rope_dim
        if q_rank is None:
            self.q_proj = nn.Linear(d_model, H * dq, bias=False)
        else:
            self.q_down = nn.Linear(d_model, _pos(q_rank, "q_rank"), bias=False)
            self.q_norm = nn.RMSNorm(q_rank, eps=eps)
            self.q_up = nn.Linear(q_rank, H * dq, bias=False)
        self.kv_down = nn.Linear(d_model, kv_rank + rope_dim, bias=False)
        self.kv_norm = nn.RMSNorm(kv_rank, eps=eps)
        self.kv_up = nn.Linear(kv_rank, H * (nope_dim + v_dim), bias=False)
        self.out_proj = nn.Linear(H * v_dim, d_model, bias=False)

    def forward(self, x: Tensor, cache: KVCache | None = None, absorbed: bool = False) -> tuple[Tensor, Tensor]:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x of shape {got} must be (B, T, d_model={self.d_model})")
        B, T, _ = x.shape
        H, dn, dr, r = self.num_heads, self.nope_dim, self.rope_dim, self.kv_rank
        start = 0 if cache is None else len(cache)
        pos = torch.arange(start, start + T, device=x.device)                     # absolute positions
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_up(self.q_norm(self.q_down(x)))
        q_nope, q_rope = q.view(B, T, H, dn + dr).transpose(1, 2).split([dn, dr], -1)   # (B, H, T, d_n), (.., d_r)
        c, k_rope = self.kv_down(x).split([r, dr], -1)                             # (B, T, r), (B, T, d_r)
        c = self.kv_norm(c)
        q_rope, k_rope = apply_rotary(q_rope, pos, self.rope_base), apply_rotary(k_rope, pos, self.rope_base)
        if cache is not None:                                                      # store only c and k^R
            c, k_rope = (t.squeeze(1) for t in cache.append(c.unsqueeze(1), k_rope.unsqueeze(1)))
        mask = torch.arange(c.size(1), device=x.device)[None, :] <= pos[:, None]  # (T, T_all): causal
        w_uk, w_uv = split_kv_up(self.kv_up.weight, H, dn, self.v_dim)
        attend = mla_absorbed_attention if absorbed else mla_attention
        o, weights = attend(q_nope, q_rope, c, k_rope, w_uk, w_uv, mask, self.scale)  # (B, H, T, d_v)
        return self.out_proj(o.transpose(1, 2).reshape(B, T, H * self.v_dim)), weights

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, kv_rank={self.kv_rank}, "
                f"nope_dim={self.nope_dim}, rope_dim={self.rope_dim}, v_dim={self.v_dim}")

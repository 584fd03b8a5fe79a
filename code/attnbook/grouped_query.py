"""Grouped-query attention with rotary positions and a key/value cache: the multi-head layer of decoder-only models.

Grouped-query attention (GQA, Ainslie et al., 2023) gives the keys and values only Hkv = ``num_kv_heads``
heads, each shared by H / Hkv query heads: query head i reads key/value head i // (H / Hkv). Hkv = H is
multi-head attention, Hkv = 1 multi-query attention (MQA, Shazeer, 2019). Optional rotary positions
(``rope_base``) rotate q and k by their positions (attnbook.apply_rotary) before the scores.
:meth:`GroupedQueryAttention.attend_cached` appends the newest tokens' keys and values to a KVCache.

With Hkv = H and no ``rope_base`` the layer computes exactly what :class:`attnbook.MultiHeadAttention` does.

Shape legend: B batch, H = num_heads, Hkv = num_kv_heads, Tq queries, Tk keys/values, D = d_model, Dh = D / H.
"""

from __future__ import annotations

from numbers import Integral, Real

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .kv_cache import KVCache
from .multihead import MultiHeadAttention, _check_inputs, _check_mask, _check_sizes, merge_heads, repeat_kv, split_heads
from .positional import apply_rotary

__all__ = ["GroupedQueryAttention"]


class GroupedQueryAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` with Hkv = ``num_kv_heads`` key/value heads, optional RoPE and a cached path.

    ``w_k`` and ``w_v`` map to Hkv * Dh features only. The projections are built in the same order and
    with the same shapes as before the split, so a seeded model gets the same initial weights.

    Shape:
        query: (B, Tq, D); key, value: (B, Tk, D); mask as for MultiHeadAttention
        -> output (B, Tq, D), weights (B, H, Tq, Tk).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True, *,
                 num_kv_heads: int | None = None, rope_base: float | None = None):
        nn.Module.__init__(self)            # not MultiHeadAttention.__init__: w_k, w_v have Hkv * Dh outputs
        self.d_model, self.num_heads, self.d_head = _check_sizes(d_model, num_heads, dropout)
        self.num_kv_heads = self._check_kv_heads(num_kv_heads)
        self.rope_base = self._check_rope(rope_base)
        d_kv = self.num_kv_heads * self.d_head                # = d_model unless GQA / MQA
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # W^Q = [W_1^Q ... W_h^Q]
        self.w_k = nn.Linear(d_model, d_kv, bias=bias)     # W^K = [W_1^K ... W_Hkv^K]
        self.w_v = nn.Linear(d_model, d_kv, bias=bias)     # W^V = [W_1^V ... W_Hkv^V]
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.dropout = nn.Dropout(float(dropout))

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        _check_inputs(self.d_model, query, key, value)
        b, tq, tk, h = query.size(0), query.size(1), key.size(1), self.num_heads
        if mask is not None:
            mask = _check_mask(mask, b, h, tq, tk)
        q = split_heads(self.w_q(query), h)  # (B, Tq, D) -> (B, H, Tq, Dh)
        k = split_heads(self.w_k(key), self.num_kv_heads)    # (B, Tk, Hkv Dh) -> (B, Hkv, Tk, Dh)
        v = split_heads(self.w_v(value), self.num_kv_heads)  # (B, Tk, Hkv Dh) -> (B, Hkv, Tk, Dh)
        q, k = self._rotate(q, 0), self._rotate(k, 0)
        k, v = (repeat_kv(t, h // self.num_kv_heads) for t in (k, v))  # (B, H, Tk, Dh) each
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Tq, Dh), (B, H, Tq, Tk)
        if self.training and self.dropout.p > 0:
            heads = self.dropout(weights) @ v  # (B, H, Tq, Tk) @ (B, H, Tk, Dh) -> (B, H, Tq, Dh)
        return self.w_o(merge_heads(heads)), weights  # Concat(heads) W^O: (B, Tq, D)

    def extra_repr(self) -> str:
        extra = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        extra += "" if self.rope_base is None else f", rope_base={self.rope_base:g}"
        return super().extra_repr() + extra

    def _check_kv_heads(self, num_kv_heads) -> int:
        if num_kv_heads is None:
            return self.num_heads
        if isinstance(num_kv_heads, bool) or not isinstance(num_kv_heads, Integral) or num_kv_heads < 1 \
                or self.num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads={num_kv_heads!r} must be a positive integer dividing "
                             f"num_heads={self.num_heads}: each key/value head serves num_heads / num_kv_heads "
                             f"query heads")
        return int(num_kv_heads)

    def _check_rope(self, rope_base) -> float | None:
        if rope_base is None:
            return None
        if isinstance(rope_base, bool) or not isinstance(rope_base, Real) or not rope_base > 1:
            raise ValueError(f"rope_base must be a number > 1 (or None for no rotary positions), got {rope_base!r}")
        if self.d_head % 2:
            raise ValueError(f"rotary positions rotate feature pairs: d_head={self.d_head} must be even")
        return float(rope_base)

    def _rotate(self, x: Tensor, start: int) -> Tensor:
        """RoPE at positions start, start + 1, ... (identity without ``rope_base``). Shape: (B, H, T, Dh)."""
        if self.rope_base is None:
            return x
        positions = torch.arange(start, start + x.size(2), device=x.device)
        return apply_rotary(x, positions, self.rope_base)

    def attend_cached(self, x: Tensor, cache: KVCache) -> tuple[Tensor, Tensor]:
        """Self-attention of the newest tokens x over the cached ones and themselves (causal, no dropout).

        The cache keeps Hkv heads (so GQA / MQA shrink it H / Hkv times); x sits at positions
        len(cache) onwards, which is where RoPE rotates its queries and keys.

        Shape:
            x: (B, Tn, D) -> output (B, Tn, D), weights (B, H, Tn, T), T = len(cache) after the call.
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x of shape {got} must be (B, Tn, d_model={self.d_model})")
        old, h, n_rep = len(cache), self.num_heads, self.num_heads // self.num_kv_heads
        q = self._rotate(split_heads(self.w_q(x), h), old)                     # (B, H, Tn, Dh)
        k = self._rotate(split_heads(self.w_k(x), self.num_kv_heads), old)     # (B, Hkv, Tn, Dh)
        v = split_heads(self.w_v(x), self.num_kv_heads)                        # (B, Hkv, Tn, Dh)
        keys, values = cache.append(k, v)                                      # (B, Hkv, T, Dh)
        # query t (position old + t) sees keys 0 .. old + t
        pos_q = torch.arange(old, old + x.size(1), device=x.device)[:, None]   # (Tn, 1)
        mask = torch.arange(keys.size(2), device=x.device) <= pos_q           # (Tn, T)
        heads, weights = scaled_dot_product_attention(q, repeat_kv(keys, n_rep), repeat_kv(values, n_rep), mask)
        return self.w_o(merge_heads(heads)), weights                           # (B, Tn, D)

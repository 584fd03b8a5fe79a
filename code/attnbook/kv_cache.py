"""A key/value cache for incremental (autoregressive) decoding.

While generating token t, the keys and values of tokens 0..t-1 do not change, so a decoder keeps
them and computes only the new token's q, k, v: one step then costs O(t) instead of recomputing
all t rows of attention, O(t^2). Shapes follow the book's legend: (B, H, T, D).

Typical use, one cache per attention layer::

    cache = KVCache()
    out, _ = cache.attend(q_prompt, k_prompt, v_prompt)   # prefill: (B, H, T0, D), causal inside
    for step in range(n_new):
        out, _ = cache.attend(q_t, k_t, v_t)               # one token: (B, H, 1, D)
"""

from __future__ import annotations

from numbers import Integral

import torch
from torch import Tensor

from .attention import scaled_dot_product_attention

__all__ = ["KVCache"]


class KVCache:
    """Growing buffers of past keys and values, shape (B, H, T, D) / (B, H, T, Dv).

    The buffers are preallocated (``max_len`` tokens, or grown by doubling when ``max_len`` is
    None), so appending one token copies only that token. ``keys`` and ``values`` are views of
    the first ``len(cache)`` positions. B, H, D, Dv, dtype and device are fixed by the first
    :meth:`append`; :meth:`reset` forgets them.

    Shape:
        keys: (B, H, T, D); values: (B, H, T, Dv), T = len(cache)
    """

    def __init__(self, max_len: int | None = None):
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, Integral)
                                    or max_len < 1):
            raise ValueError(f"max_len must be a positive integer or None, got {max_len!r}")
        self.max_len = None if max_len is None else int(max_len)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (start a new sequence)."""
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def keys(self) -> Tensor | None:
        """Cached keys (B, H, T, D), or None before the first append."""
        return None if self._k is None else self._k[:, :, :self._len]

    @property
    def values(self) -> Tensor | None:
        """Cached values (B, H, T, Dv), or None before the first append."""
        return None if self._v is None else self._v[:, :, :self._len]

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values (2 * B * H * T * D * itemsize when Dv = D)."""
        if self._k is None:
            return 0
        return self.keys.numel() * self._k.element_size() + self.values.numel() * self._v.element_size()

    @property
    def capacity(self) -> int:
        """Token slots allocated (>= len(cache)): max_len, or 16, 32, 64, ... as the buffers double."""
        return 0 if self._k is None else self._k.size(2)

    def allocated_nbytes(self) -> int:
        """Bytes of the storage behind the buffers (capacity slots, not len(cache)): what the cache occupies."""
        if self._k is None:
            return 0
        return self._k.untyped_storage().nbytes() + self._v.untyped_storage().nbytes()

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the keys and values of new tokens; return all cached keys and values.

        Shape:
            k: (B, H, Tn, D); v: (B, H, Tn, Dv) -> keys (B, H, T, D), values (B, H, T, Dv), T = old T + Tn
        """
        self._check(k, v)
        new = k.size(2)
        need = self._len + new
        if self.max_len is not None and need > self.max_len:
            raise ValueError(f"cannot append {new} tokens to a cache holding {self._len} "
                             f"with max_len={self.max_len}")
        if self._k is None or need > self._k.size(2):
            cap = self.max_len or max(need, 2 * (0 if self._k is None else self._k.size(2)), 16)
            self._k = self._grow(self._k, k, cap)
            self._v = self._grow(self._v, v, cap)
        self._k[:, :, self._len:need] = k        # (B, H, Tn, D) into positions [T_old, T)
        self._v[:, :, self._len:need] = v
        self._len = need
        return self.keys, self.values

    def reorder(self, index: Tensor) -> None:
        """Keep batch row ``index[i]`` as row i (beam search: each beam continues a parent's prefix).

        Shape: index (B_new,) int64 in [0, B) -> keys (B_new, H, T, D).
        """
        if self._k is None:
            return
        if not isinstance(index, Tensor) or index.dim() != 1 or index.dtype != torch.long:
            got = f"{index.dtype} {tuple(index.shape)}" if isinstance(index, Tensor) else type(index).__name__
            raise ValueError(f"index must be a 1-D int64 tensor, got {got}")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self._k.size(0)):
            raise ValueError(f"index must lie in [0, {self._k.size(0)}), got min {int(index.min())}, "
                             f"max {int(index.max())}")
        self._k, self._v = self._k[index], self._v[index]

    def _grow(self, old: Tensor | None, like: Tensor, cap: int) -> Tensor:
        buf = like.new_empty(like.size(0), like.size(1), cap, like.size(3))   # (B, H, cap, D)
        if old is not None:
            buf[:, :, :self._len] = old[:, :, :self._len]
        return buf

    def _check(self, k, v) -> None:
        for name, x in (("k", k), ("v", v)):
            if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
                got = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"{name} must be a floating-point (B, H, Tn, D) tensor, got {got}")
        if k.shape[:3] != v.shape[:3] or k.dtype != v.dtype or k.device != v.device:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in (B, H, Tn), "
                             f"dtype and device")
        if self._k is not None:
            if (k.shape[:2] != self._k.shape[:2] or k.size(3) != self._k.size(3)
                    or v.size(3) != self._v.size(3) or k.dtype != self._k.dtype or k.device != self._k.device):
                raise ValueError(f"k {tuple(k.shape)} / v {tuple(v.shape)} ({k.dtype}, {k.device}) do not "
                                 f"match the cache's (B, H, T, D) = {tuple(self.keys.shape)}, "
                                 f"Dv = {self._v.size(3)} ({self._k.dtype}, {self._k.device})")

    def attend(self, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> tuple[Tensor, Tensor]:
        """Append the new tokens' k, v, then let their queries attend causally to the whole cache.

        New query t sits at position T_old + t and sees keys 0..T_old + t (itself included), so
        a prefill of Tn tokens equals causal attention over them and one step equals the last
        row of causal attention over the full sequence.

        Shape:
            q: (B, H, Tn, D); k: (B, H, Tn, D); v: (B, H, Tn, Dv)
            -> output (B, H, Tn, Dv), weights (B, H, Tn, T)
        """
        if not isinstance(q, Tensor) or not isinstance(k, Tensor) or q.shape != k.shape:
            got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
            raise ValueError(f"q {got} must have the shape of the new keys {tuple(getattr(k, 'shape', ()))}")
        old = self._len
        keys, values = self.append(k, v)
        mask = None
        if q.size(2) > 1:                         # a chunk: hide keys after each query's position
            pos_q = torch.arange(old, old + q.size(2), device=q.device)[:, None]   # (Tn, 1)
            pos_k = torch.arange(keys.size(2), device=q.device)[None, :]           # (1, T)
            mask = pos_k <= pos_q                                                  # (Tn, T)
        return scaled_dot_product_attention(q, keys, values, mask, scale)

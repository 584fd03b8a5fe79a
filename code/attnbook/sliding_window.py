"""Sliding-window attention with a rolling-buffer KV cache (Mistral 7B), and attention sinks (StreamingLLM).

Window W: query i sees key j iff i - W < j <= i (itself and the W - 1 tokens before it). Through L layers
information still travels up to L (W - 1) positions. A decoder then never needs a key older than W tokens,
so its cache is a ring of W slots: token i goes to slot i mod W, overwriting token i - W.
Attention sinks (Xiao et al., 2024): keep the first s tokens as well, key j is visible iff
j <= i and (i - j < W or j < s); the cache holds s + W tokens, whatever the length.

Keys are cached after RoPE, at their original positions (as Mistral); :func:`streaming_lm_forward` instead
re-numbers the positions inside the cache, as StreamingLLM does (keys cached before RoPE). Shapes (B, H, T, D) as in kv_cache.py; masks True = may attend.
"""

from __future__ import annotations

from numbers import Integral

import torch
from torch import Tensor

from .attention import scaled_dot_product_attention
from .efficient import sliding_window_mask
from .masks import causal_mask
from .multihead import merge_heads, repeat_kv, split_heads
from .positional import apply_rotary

__all__ = ["band_mask_at", "band_mask", "RollingKVCache", "rolling_lm_forward", "streaming_lm_forward",
           "clamped_lm_forward"]


def _check_int(n, name: str, minimum: int) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {n!r}")
    return int(n)


def band_mask_at(q_positions: Tensor, k_positions: Tensor, window: int, sinks: int = 0) -> Tensor:
    """Which keys each query may see, by absolute position: causal, within the window, or a sink.

    Formula: M_ij = (k_j <= q_i) and (q_i - k_j < window  or  k_j < sinks)

    Shape:
        q_positions: (Tq,) int; k_positions: (Tk,) int -> (Tq, Tk) torch.bool
    """
    window, sinks = _check_int(window, "window", 1), _check_int(sinks, "sinks", 0)
    for name, p in (("q_positions", q_positions), ("k_positions", k_positions)):
        if not isinstance(p, Tensor) or p.dim() != 1 or p.is_floating_point():
            got = f"{p.dtype} {tuple(p.shape)}" if isinstance(p, Tensor) else type(p).__name__
            raise ValueError(f"{name} must be a 1-D integer tensor, got {got}")
    d = q_positions[:, None] - k_positions[None, :].to(q_positions.device)   # (Tq, Tk): i - j
    return (d >= 0) & ((d < window) | (k_positions[None, :].to(d.device) < sinks))


def band_mask(n: int, window: int, sinks: int = 0, device: torch.device | str | None = None) -> Tensor:
    """Banded causal mask over positions 0 .. n-1 (plus the first ``sinks`` columns).

    With sinks = 0 this is :func:`attnbook.efficient.sliding_window_mask` (causal).

    Formula: M_ij = (j <= i) and (i - W < j  or  j < sinks)

    Shape:
        -> (n, n) torch.bool
    """
    n, sinks = _check_int(n, "n", 0), _check_int(sinks, "sinks", 0)
    mask = sliding_window_mask(n, window, causal=True, device=device)     # i - W < j <= i
    if sinks:
        sink_cols = torch.arange(n, device=device)[None, :] < sinks        # (1, n): j < s
        mask = mask | (causal_mask(n, device=device) & sink_cols)          # sink columns, still causal
    return mask


class RollingKVCache:
    """A fixed-size cache: s sink slots for tokens 0 .. s-1, then a ring of W slots for the latest W tokens.

    Token at position p goes to slot p if p < s, else slot s + (p - s) mod W, overwriting the token
    W positions earlier. The buffers never grow: :meth:`allocated_nbytes` is 2 B H (s + W) D * itemsize
    (Dv = D) from the first token on. ``positions`` tells which token sits in each slot (-1: empty).

    Shape:
        keys: (B, H, s + W, D); values: (B, H, s + W, Dv); positions: (s + W,)
    """

    def __init__(self, window: int, sinks: int = 0):
        self.window = _check_int(window, "window", 1)
        self.sinks = _check_int(sinks, "sinks", 0)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (start a new sequence)."""
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.positions: Tensor | None = None
        self.seen = 0                             # tokens appended so far = position of the next token
        self.key_positions: Tensor | None = None  # positions of the keys in the last attend's weights

    def __len__(self) -> int:
        """Tokens held (at most s + W)."""
        return 0 if self.positions is None else int((self.positions >= 0).sum())

    def allocated_nbytes(self) -> int:
        """Bytes of the storage behind the key and value buffers: fixed once the first token arrives."""
        if self.keys is None:
            return 0
        return self.keys.untyped_storage().nbytes() + self.values.untyped_storage().nbytes()

    def _slots(self, pos: Tensor) -> Tensor:
        s = self.sinks
        return torch.where(pos < s, pos, s + (pos - s).remainder(self.window))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> tuple[Tensor, Tensor]:
        """Let new tokens attend to the cached tokens and to each other (band mask), then store them.

        The Tn new tokens sit at positions seen .. seen + Tn - 1. Attention runs over the held tokens
        plus the new ones before any is overwritten, so a prefill longer than W is exact too.

        Shape:
            q: (B, H, Tn, D); k: (B, Hkv, Tn, D); v: (B, Hkv, Tn, Dv), Hkv = H or 1 (MQA, broadcast)
            -> output (B, H, Tn, Dv), weights (B, H, Tn, held + Tn): keys in slot order, then the new
            ones; ``key_positions`` (held + Tn,) gives each key's position (e.g. the mass on token 0)
        """
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"{name} must be a floating (B, H, Tn, D) tensor, got {got}")
        if q.shape[0] != k.size(0) or q.shape[2:] != k.shape[2:] or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} must be "
                             f"(B, H, Tn, D), (B, Hkv, Tn, D), (B, Hkv, Tn, Dv)")
        B, H, Tn, _ = k.shape
        size = self.sinks + self.window
        if self.keys is None:
            self.keys = k.new_zeros(B, H, size, k.size(3))
            self.values = v.new_zeros(B, H, size, v.size(3))
            self.positions = torch.full((size,), -1, dtype=torch.long, device=k.device)
        elif self.keys.shape[:2] != (B, H) or self.keys.size(3) != k.size(3) or self.values.size(3) != v.size(3):
            raise ValueError(f"k {tuple(k.shape)}, v {tuple(v.shape)} do not match the cache's "
                             f"{tuple(self.keys.shape)} / {tuple(self.values.shape)}")
        held = self.positions >= 0                                           # (size,)
        new_pos = torch.arange(self.seen, self.seen + Tn, device=k.device)   # (Tn,)
        keys = torch.cat([self.keys[:, :, held], k], dim=2)                  # (B, H, held + Tn, D)
        values = torch.cat([self.values[:, :, held], v], dim=2)
        self.key_positions = torch.cat([self.positions[held], new_pos])      # (held + Tn,)
        mask = band_mask_at(new_pos, self.key_positions, self.window, self.sinks)
        out = scaled_dot_product_attention(q, keys, values, mask, scale)
        self.seen += Tn
        keep = (new_pos < self.sinks) | (new_pos >= self.seen - self.window)  # the sinks and the last W
        slots = self._slots(new_pos[keep])                                   # distinct slots
        self.keys[:, :, slots] = k[:, :, keep]
        self.values[:, :, slots] = v[:, :, keep]
        self.positions[slots] = new_pos[keep]
        return out


@torch.no_grad()
def rolling_lm_forward(model, ids: Tensor, window: int, sinks: int = 0,
                       chunk: int | None = None) -> tuple[Tensor, list[Tensor]]:
    """Run an :class:`attnbook.DecoderOnlyLM` (pre-LN, RoPE) through one RollingKVCache per layer.

    The tokens are fed ``chunk`` at a time (default: all at once); each layer's queries and keys are
    rotated at their absolute positions and attend through the cache, so the logits equal
    ``model(ids, attn_mask=band_mask(T, window, sinks))`` while no layer ever holds more than
    sinks + window keys. With window >= T it is the ordinary growing cache (full causal attention).

    Shape:
        ids: (B, T) int64 -> logits (B, T, V), weights: one (B, H, Tc, held + Tc) per layer from the last
        chunk (all of it when chunk is None: (B, H, T, T) with window >= T, keys in position order)
    """
    _check_lm(model, ids)
    layers = model.layers
    T = ids.size(1)
    chunk = T if chunk is None else _check_int(chunk, "chunk", 1)
    caches = [RollingKVCache(window, sinks) for _ in layers]
    logits, weights = [], []
    for start in range(0, T, chunk):
        x = model.embed(ids[:, start:start + chunk])                             # (B, Tc, D)
        pos = torch.arange(start, start + x.size(1), device=ids.device)          # (Tc,)
        weights = []
        for layer, cache in zip(layers, caches):
            mha = layer.self_attn
            h = layer.norm1(x)
            q = apply_rotary(split_heads(mha.w_q(h), mha.num_heads), pos, mha.rope_base)        # (B, H, Tc, Dh)
            k = apply_rotary(split_heads(mha.w_k(h), mha.num_kv_heads), pos, mha.rope_base)     # (B, Hkv, Tc, Dh)
            v = split_heads(mha.w_v(h), mha.num_kv_heads)
            n_rep = mha.num_heads // mha.num_kv_heads
            out, w = cache.attend(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep))   # (B, H, Tc, Dh)
            x = x + mha.w_o(merge_heads(out))                                    # pre-LN residual
            x = x + layer.ffn(layer.norm3(x))
            weights.append(w)
        logits.append(model.lm_head(model.final_norm(x)))
    return torch.cat(logits, 1), weights


def _check_lm(model, ids: Tensor) -> None:
    layers = getattr(model, "layers", None)
    if layers is None or not all(getattr(la, "norm_first", False) and la.cross_attn is None
                                 and la.self_attn.rope_base is not None for la in layers):
        raise ValueError("model must be a pre-LN decoder-only LM with RoPE (attnbook.DecoderOnlyLM)")
    model.check_ids(ids)


def _rope_lm_forward(model, ids: Tensor, visible: Tensor, moved: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """The model's forward with its own mask ``visible`` (T, T); where ``moved`` (T, T) is True the score is
    taken with the query rotated at ``q_pos[i]`` and the key at ``k_pos[j]`` instead of at i and j (RoPE's score
    depends on the difference only)."""
    T = ids.size(1)
    pos = torch.arange(T, device=ids.device)
    x = model.embed(ids)                                                               # (B, T, D)
    for layer in model.layers:
        mha = layer.self_attn
        h = layer.norm1(x)
        q, k = split_heads(mha.w_q(h), mha.num_heads), split_heads(mha.w_k(h), mha.num_kv_heads)
        v = split_heads(mha.w_v(h), mha.num_kv_heads)
        n_rep = mha.num_heads // mha.num_kv_heads
        rope = lambda x, p: apply_rotary(x, p, mha.rope_base)                         # noqa: E731
        near = rope(q, pos) @ repeat_kv(rope(k, pos), n_rep).transpose(-1, -2)      # distance i - j
        far = rope(q, q_pos) @ repeat_kv(rope(k, k_pos), n_rep).transpose(-1, -2)   # distance q_pos[i] - k_pos[j]
        scores = torch.where(moved, far, near) / q.size(-1) ** 0.5                     # (B, H, T, T)
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        x = x + mha.w_o(merge_heads(weights @ repeat_kv(v, n_rep)))
        x = x + layer.ffn(layer.norm3(x))
    return model.lm_head(model.final_norm(x))


@torch.no_grad()
def streaming_lm_forward(model, ids: Tensor, window: int, sinks: int = 0) -> Tensor:
    """The logits of decoding an :class:`attnbook.DecoderOnlyLM` token by token with StreamingLLM's positions
    (all steps computed at once).

    At step t each layer holds the first ``sinks`` tokens and the last ``window`` ones (t included),
    in position order, with their keys cached *before* RoPE. The held keys are rotated at their place
    in the cache, 0 .. n-1, and the query at n - 1 (Xiao et al., 2024, sec. 3.2): distances never exceed
    sinks + window - 1, however long the text. Without eviction (sinks + window > t) this is the
    ordinary causal model; with ``sinks=0`` RoPE's distances are the original ones, so the result equals
    ``model(ids, attn_mask=band_mask(T, window))``.

    Shape:
        ids: (B, T) int64 -> logits (B, T, V)
    """
    _check_lm(model, ids)
    window, sinks = _check_int(window, "window", 1), _check_int(sinks, "sinks", 0)
    T = ids.size(1)
    pos = torch.arange(T, device=ids.device)
    # cache of n = min(t + 1, sinks + window) tokens renumbered 0 .. n-1: a window key keeps distance t - j,
    # an evicted-window sink j sits at j while the query sits at n - 1
    sink_only = (pos[None, :] < sinks) & (pos[:, None] - pos[None, :] >= window)       # (T, T)
    return _rope_lm_forward(model, ids, band_mask(T, window, sinks, device=ids.device), sink_only,
                            pos.clamp(max=sinks + window - 1), pos)


@torch.no_grad()
def clamped_lm_forward(model, ids: Tensor, max_distance: int) -> Tensor:
    """Full causal attention in which every key farther than ``max_distance`` is scored as if it were at
    ``max_distance``: no key is dropped, only RoPE's distances are capped. With max_distance >= T - 1 this is
    ``model(ids)``.

    Shape:
        ids: (B, T) int64 -> logits (B, T, V)
    """
    _check_lm(model, ids)
    max_distance = _check_int(max_distance, "max_distance", 0)
    T = ids.size(1)
    pos = torch.arange(T, device=ids.device)
    far = (pos[:, None] - pos[None, :]) > max_distance                                 # (T, T)
    return _rope_lm_forward(model, ids, causal_mask(T, device=ids.device), far,
                            torch.full_like(pos, max_distance), torch.zeros_like(pos))

"""A decoder-only (GPT-style) language model: the Transformer decoder minus cross-attention.

    x_0 = E[ids]                                   token embedding, no position table (RoPE instead)
    x_l = DecoderLayer_l(x_{l-1})                  pre-LN: masked self-attention -> FFN, no cross-attention
    logits = LayerNorm(x_N) E^T (+ b)              output layer tied to the embedding (Press & Wolf, 2017)

Trained with next-token cross-entropy (teacher forcing: logits[:, t] predict ids[:, t + 1]). Each layer
is :class:`attnbook.DecoderLayer` with ``cross_attention=False``; its self-attention rotates queries and
keys by their positions (RoPE, attnbook.apply_rotary) and may share key/value heads (``num_kv_heads``).

Shape legend: B batch, T sequence length, D = d_model, H heads, Hkv key/value heads, Dh = D / H,
V vocabulary, N layers.
"""

from __future__ import annotations

from numbers import Integral

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import causal_mask
from .sampling import sample_next
from .transformer import DecoderCache, DecoderLayer, LayerCache

__all__ = ["DecoderOnlyLM", "next_token_loss", "kv_cache_bytes"]


def kv_cache_bytes(num_layers: int, batch: int, seq_len: int, num_kv_heads: int, d_head: int,
                   bytes_per_value: int = 4) -> int:
    """Bytes of a KV cache: keys and values, every layer, every cached token: 2 N B T Hkv Dh * itemsize."""
    for name, n in (("num_layers", num_layers), ("batch", batch), ("seq_len", seq_len),
                    ("num_kv_heads", num_kv_heads), ("d_head", d_head), ("bytes_per_value", bytes_per_value)):
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {n!r}")
    return 2 * num_layers * batch * seq_len * num_kv_heads * d_head * bytes_per_value


class DecoderOnlyLM(nn.Module):
    """GPT-style causal language model built from ``num_layers`` pre-LN :class:`attnbook.DecoderLayer`.

    ``forward(ids)`` returns next-token logits for every position at once (causal mask), or for the last
    position only with ``last_only=True``; ``attn_mask`` (T, T) bool, True = may attend, replaces the
    causal mask (e.g. a sliding window, attnbook.band_mask), without a cache only;
    ``forward(ids, cache)`` takes only the new tokens, which sit at positions len(cache) onwards, and
    reuses the cached keys and values. ``tie_weights`` makes the output layer the embedding's transpose;
    ``output_bias`` adds a bias b (V,) to the logits, which :meth:`start_from_unigram` sets to log frequencies.

    Shape:
        ids: (B, T) int64 in [0, V) -> logits (B, T, V); (B, 1, V) with last_only
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int,
                 dropout: float = 0.0, *, num_kv_heads: int | None = None, rope_base: float = 10000.0,
                 tie_weights: bool = True, output_bias: bool = False):
        super().__init__()
        for name, n in (("vocab_size", vocab_size), ("d_model", d_model), ("num_layers", num_layers),
                        ("d_ff", d_ff)):
            if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        self.vocab_size = int(vocab_size)
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=0.02)                      # GPT-2's initialisation
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first=True, cross_attention=False,
                         num_kv_heads=num_kv_heads, rope_base=rope_base) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)                           # pre-LN needs one at the end
        self.lm_head = nn.Linear(d_model, vocab_size, bias=output_bias)
        if output_bias:
            nn.init.zeros_(self.lm_head.bias)
        if tie_weights:
            self.lm_head.weight = self.embed.weight                       # one (V, D) matrix, used twice

    @torch.no_grad()
    def start_from_unigram(self, counts: Tensor, alpha: float = 0.5) -> None:
        """Set the output bias to log((counts + alpha) / sum): with small weights the untrained model then
        predicts the unigram distribution instead of a uniform one over V tokens. Shape: counts (V,)."""
        if self.lm_head.bias is None:
            raise ValueError("start_from_unigram needs a model built with output_bias=True")
        if not isinstance(counts, Tensor) or counts.shape != (self.vocab_size,) or bool((counts < 0).any()):
            got = tuple(counts.shape) if isinstance(counts, Tensor) else type(counts).__name__
            raise ValueError(f"counts must be a non-negative ({self.vocab_size},) tensor, got {got}")
        if not alpha > 0:
            raise ValueError(f"alpha must be positive, got {alpha!r}")
        smoothed = counts.double() + alpha
        self.lm_head.bias.copy_((smoothed / smoothed.sum()).log())

    def new_cache(self) -> DecoderCache:
        """An empty cache: one KVCache of (B, Hkv, T, Dh) keys and values per layer."""
        return DecoderCache([LayerCache() for _ in self.layers])

    def check_ids(self, ids: Tensor) -> None:
        """ValueError unless ids is a (B, T) int64 tensor, T >= 1, of token ids in [0, vocab_size)."""
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype != torch.long or ids.size(1) == 0:
            got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"ids must be a (B, T) int64 tensor with T >= 1, got {got}")
        if int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size:
            raise ValueError(f"ids must lie in [0, {self.vocab_size}), got min {int(ids.min())}, max {int(ids.max())}")

    def forward(self, ids: Tensor, cache: DecoderCache | None = None, *, last_only: bool = False,
                attn_mask: Tensor | None = None) -> Tensor:
        self.check_ids(ids)
        if cache is not None and len(cache.layers) != len(self.layers):
            raise ValueError(f"cache has {len(cache.layers)} layers, the model {len(self.layers)}")
        T = ids.size(1)
        if attn_mask is not None and (cache is not None or not isinstance(attn_mask, Tensor)
                                      or attn_mask.dtype != torch.bool or attn_mask.shape != (T, T)):
            got = f"{attn_mask.dtype} {tuple(attn_mask.shape)}" if isinstance(attn_mask, Tensor) else attn_mask
            raise ValueError(f"attn_mask must be a ({T}, {T}) torch.bool tensor, used without a cache; got {got}"
                             + (" with a cache" if cache is not None else ""))
        x = self.dropout(self.embed(ids))                                 # (B, T, D)
        if attn_mask is not None:
            mask = attn_mask.to(ids.device)                               # (T, T)
        else:                                                             # a cache masks its own new rows
            mask = causal_mask(T, device=ids.device) if cache is None else None
        for i, layer in enumerate(self.layers):
            x, _, _ = layer(x, None, mask, None, None if cache is None else cache.layers[i])
        if last_only:                                                     # generation needs the last row only
            x = x[:, -1:]                                                 # (B, 1, D), as nanoGPT does
        return self.lm_head(self.final_norm(x))                           # (B, T, V) or (B, 1, V)

    @torch.no_grad()
    def generate(self, prompt: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True, max_context: int | None = None) -> Tensor:
        """Append ``max_new_tokens`` tokens drawn by :func:`attnbook.sampling.sample_next` (temperature 0: greedy).

        ``max_context`` (the window the model was trained on) crops what the model reads to the last
        ``max_context`` tokens, as nanoGPT does: past it the cache is dropped and the window re-read at
        every step, so no position beyond the trained ones is ever used. ``use_cache=False`` re-reads the
        whole (cropped) sequence at every step; both give the same tokens. Runs in eval mode (restored after).

        Shape:
            prompt: (B, T0) int64 -> (B, T0 + max_new_tokens)
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
        if max_context is not None and (isinstance(max_context, bool) or not isinstance(max_context, Integral)
                                        or max_context < 1):
            raise ValueError(f"max_context must be a positive integer or None, got {max_context!r}")
        was_training = self.training
        self.eval()
        try:
            ids, cache = prompt, (self.new_cache() if use_cache else None)
            new = prompt                                                  # what the cache has not seen yet
            for _ in range(max_new_tokens):
                if max_context is not None and ids.size(1) > max_context:
                    cache = None                                          # the window slides: re-read it
                window = ids if max_context is None else ids[:, -max_context:]   # (B, <= max_context)
                logits = self(new, cache, last_only=True) if cache is not None else self(window, last_only=True)
                nxt = sample_next(logits[:, -1], temperature, top_k, top_p, generator)[:, None]   # (B, 1)
                ids, new = torch.cat([ids, nxt], 1), nxt
            return ids
        finally:
            self.train(was_training)


def next_token_loss(model: nn.Module, ids: Tensor) -> Tensor:
    """Mean cross-entropy of predicting ids[:, t + 1] from ids[:, :t + 1] (teacher forcing).

    Shape: ids (B, T + 1) -> scalar.
    """
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.size(1) < 2:
        raise ValueError(f"ids of shape {tuple(getattr(ids, 'shape', ()))} must be (B, T + 1) with T >= 1")
    logits = model(ids[:, :-1])                                           # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

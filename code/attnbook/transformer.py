"""The Transformer encoder-decoder (Vaswani et al., 2017), post-LN as in the paper or pre-LN.

Every sublayer F (self-attention, cross-attention, feed-forward) sits in a residual branch:

    post-LN (paper):      x <- LayerNorm(x + Dropout(F(x)))
    pre-LN (Xiong 2020):  x <- x + Dropout(F(LayerNorm(x)))       (+ one final LayerNorm per stack)

Encoder layer: self-attention -> FFN. Decoder layer: masked self-attention -> cross-attention over
the encoder output -> FFN, in this order. Attention is :class:`attnbook.MultiHeadAttention`; the decoder's
self-attention is its extension :class:`attnbook.GroupedQueryAttention` (GQA, RoPE, cached steps).

Shape legend: B batch, T_src source length, T target length, D = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .kv_cache import KVCache
from .masks import causal_mask, padding_to_attention_mask
from .grouped_query import GroupedQueryAttention
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .positional import sinusoidal_encoding

__all__ = ["PositionwiseFeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
           "Transformer", "LayerCache", "DecoderCache"]


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, the same two-layer MLP applied at every position.

    Shape:
        x: (..., D) -> (..., D); hidden width d_ff.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)   # on the hidden activations, as torch's layers do

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))  # (..., d_ff) -> (..., D)


class _Residual(nn.Module):
    """Holds norm_first and applies LayerNorm before the sublayer (pre-LN) or after the sum (post-LN)."""

    def __init__(self, norm_first: bool):
        super().__init__()
        self.norm_first = bool(norm_first)

    def _pre(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.norm_first else x        # pre-LN: F sees LayerNorm(x)

    def _post(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return x if self.norm_first else norm(x)        # post-LN: LayerNorm(x + F(x))


class EncoderLayer(_Residual):
    """Self-attention then FFN, each with residual + LayerNorm (post-LN unless ``norm_first``).

    Shape:
        x: (B, T_src, D); mask: (B, 1, 1, T_src) or (T_src, T_src) bool, True = may attend
        -> output (B, T_src, D), self-attention weights (B, H, T_src, T_src).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False):
        super().__init__(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h = self._pre(x, self.norm1)
        a, weights = self.self_attn(h, h, h, mask)                # every position attends to every other
        x = self._post(x + self.dropout1(a), self.norm1)
        x = self._post(x + self.dropout2(self.ffn(self._pre(x, self.norm2))), self.norm2)
        return x, weights


@dataclass
class LayerCache:
    """What incremental decoding keeps for one decoder layer: the target's keys and values so far
    (a KVCache) and the encoder output's cross-attention keys and values (projected once).

    Shape: memory_kv: two tensors (B, H, T_src, D/H), or None before the first step.
    """

    self_attn: KVCache = field(default_factory=KVCache)
    memory_kv: tuple[Tensor, Tensor] | None = None


@dataclass
class DecoderCache:
    """One :class:`LayerCache` per decoder layer; len(cache) = target tokens processed so far.

    Shape: layers[i].self_attn.keys: (B, H, len(cache), D/H).
    """

    layers: list[LayerCache]

    def __len__(self) -> int:
        return len(self.layers[0].self_attn)

    def reorder(self, index: Tensor) -> None:
        """Row i of every layer's keys and values becomes old row ``index[i]``. Shape: index (B,) int64."""
        for layer in self.layers:
            layer.self_attn.reorder(index)
            if layer.memory_kv is not None:
                layer.memory_kv = tuple(t[index] for t in layer.memory_kv)


def _attend_cached(mha: GroupedQueryAttention, x: Tensor, cache: KVCache) -> tuple[Tensor, Tensor]:
    """Masked self-attention for the newest tokens only, reusing the cached keys and values.

    Shape: x (B, Tn, D) -> (B, Tn, D), weights (B, H, Tn, T_cached + Tn).
    """
    if mha.num_kv_heads != mha.num_heads or mha.rope_base is not None:
        return mha.attend_cached(x, cache)   # GQA / RoPE layers (attnbook.gpt): the general path
    h = mha.num_heads
    q, k, v = (split_heads(w(x), h) for w in (mha.w_q, mha.w_k, mha.w_v))  # (B, H, Tn, Dh) each
    out, weights = cache.attend(q, k, v)                                      # causal over cache + new
    return mha.w_o(merge_heads(out)), weights                                 # (B, Tn, D)


class DecoderLayer(_Residual):
    """Masked self-attention -> cross-attention (queries: target, keys/values: encoder output) -> FFN.

    With ``cache`` (one layer's slot of a :class:`DecoderCache`), x holds only the new target
    tokens: their keys and values join the cache, and the encoder's are projected once. The
    cached path is for inference: it applies no attention dropout.

    ``cross_attention=False`` drops sub-layer 2 (``cross_attn``, ``norm2``, ``dropout2``): the layer of a
    decoder-only language model (attnbook.gpt), called with ``memory=None``. ``num_kv_heads`` and
    ``rope_base`` go to the self-attention (grouped-query heads, rotary positions).

    Shape:
        x: (B, T, D); memory: (B, T_src, D); tgt_mask: (T, T); memory_mask: (B, 1, 1, T_src)
        -> output (B, T, D), self weights (B, H, T, T), cross weights (B, H, T, T_src) (None without cross-attention).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False, *,
                 cross_attention: bool = True, num_kv_heads: int | None = None, rope_base: float | None = None):
        super().__init__(norm_first)
        self.self_attn = GroupedQueryAttention(d_model, num_heads, dropout, num_kv_heads=num_kv_heads,
                                               rope_base=rope_base)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout) if cross_attention else None
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))
        if not cross_attention:               # decoder-only: no encoder to read from, no sub-layer 2
            del self.norm2, self.dropout2

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, cache: LayerCache | None = None):
        # 1) masked self-attention: position t sees target positions <= t only
        h = self._pre(x, self.norm1)
        if cache is None:
            a, self_w = self.self_attn(h, h, h, tgt_mask)
        else:
            a, self_w = _attend_cached(self.self_attn, h, cache.self_attn)
        x = self._post(x + self.dropout1(a), self.norm1)
        # 2) cross-attention: queries from the decoder, keys and values from the encoder
        cross_w = None
        if self.cross_attn is not None:
            h = self._pre(x, self.norm2)
            if cache is None:
                a, cross_w = self.cross_attn(h, memory, memory, memory_mask)
            else:
                a, cross_w = self._cross_cached(h, memory, memory_mask, cache)
            x = self._post(x + self.dropout2(a), self.norm2)
        # 3) position-wise feed-forward
        x = self._post(x + self.dropout3(self.ffn(self._pre(x, self.norm3))), self.norm3)
        return x, self_w, cross_w

    def _cross_cached(self, h: Tensor, memory: Tensor, memory_mask: Tensor | None, cache: LayerCache):
        mha = self.cross_attn
        if cache.memory_kv is None:   # first step: project the encoder output once, (B, H, T_src, Dh) each
            cache.memory_kv = (split_heads(mha.w_k(memory), mha.num_heads),
                               split_heads(mha.w_v(memory), mha.num_heads))
        k, v = cache.memory_kv
        q = split_heads(mha.w_q(h), mha.num_heads)                         # (B, H, Tn, Dh)
        out, weights = scaled_dot_product_attention(q, k, v, memory_mask)  # (B, H, Tn, Dh), (B, H, Tn, T_src)
        return mha.w_o(merge_heads(out)), weights


def _check_positive(**values) -> None:
    for name, n in values.items():
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")


class _Stack(nn.Module):
    """Token embedding * sqrt(D) + sinusoidal positions, dropout, then ``num_layers`` layers."""

    def __init__(self, layer_cls, vocab_size, d_model, num_heads, num_layers, d_ff, dropout,
                 norm_first, pad_id, max_len):
        super().__init__()
        _check_positive(vocab_size=vocab_size, d_model=d_model, num_layers=num_layers, d_ff=d_ff, max_len=max_len)
        self.d_model, self.pad_id = d_model, pad_id
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        # N(0, 1/D), so that embedding * sqrt(D) has unit-size entries like the positions (fairseq's
        # choice); nn.Embedding's N(0, 1) would be 8x larger at D = 64 and drown the positions.
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        with torch.no_grad():
            self.embed.weight[pad_id].zero_()
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)  # (max_len, D)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(layer_cls(d_model, num_heads, d_ff, dropout, norm_first)
                                    for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()  # pre-LN needs it

    def embed_tokens(self, ids: Tensor, start: int = 0) -> Tensor:
        if ids.dim() != 2 or ids.dtype != torch.long:
            raise ValueError(f"token ids must be a (B, T) int64 tensor, got {ids.dtype} {tuple(ids.shape)}")
        end = start + ids.size(1)
        if end > self.pe.size(0):
            raise ValueError(f"positions {start}..{end - 1} exceed max_len={self.pe.size(0)}")
        x = self.embed(ids) * math.sqrt(self.d_model) + self.pe[start:end].to(self.embed.weight.dtype)
        return self.dropout(x)                                              # (B, T, D)


class Encoder(_Stack):
    """Shape: src (B, T_src) ids, src_mask (B, 1, 1, T_src) -> memory (B, T_src, D),
    weights: num_layers x (B, H, T_src, T_src)."""

    def __init__(self, vocab_size, d_model, num_heads, num_layers, d_ff, dropout=0.1, norm_first=False,
                 pad_id=0, max_len=512):
        super().__init__(EncoderLayer, vocab_size, d_model, num_heads, num_layers, d_ff, dropout,
                         norm_first, pad_id, max_len)

    def forward(self, src: Tensor, src_mask: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:
        x, weights = self.embed_tokens(src), []
        for layer in self.layers:                # all T_src positions of a layer in one batched pass
            x, w = layer(x, src_mask)
            weights.append(w)
        return self.final_norm(x), weights


class Decoder(_Stack):
    """Shape: tgt (B, T) ids, memory (B, T_src, D) -> states (B, T, D), self and cross weights per layer.

    With ``cache``, ``tgt`` holds the new tokens only and sits at positions len(cache) onwards.
    """

    def __init__(self, vocab_size, d_model, num_heads, num_layers, d_ff, dropout=0.1, norm_first=False,
                 pad_id=0, max_len=512):
        super().__init__(DecoderLayer, vocab_size, d_model, num_heads, num_layers, d_ff, dropout,
                         norm_first, pad_id, max_len)

    def forward(self, tgt: Tensor, memory: Tensor, memory_mask: Tensor | None = None,
                cache: DecoderCache | None = None):
        start = 0 if cache is None else len(cache)
        x = self.embed_tokens(tgt, start)
        # Right-padded targets need no key-padding mask: the causal mask already hides every pad
        # key from every real query, and the loss ignores the pad queries.
        tgt_mask = causal_mask(tgt.size(1), device=tgt.device) if cache is None else None
        self_ws, cross_ws = [], []
        for i, layer in enumerate(self.layers):
            x, sw, cw = layer(x, memory, tgt_mask, memory_mask, None if cache is None else cache.layers[i])
            self_ws.append(sw)
            cross_ws.append(cw)
        return self.final_norm(x), self_ws, cross_ws


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``forward(src, tgt)`` returns next-token logits.

    Builds its own masks: source padding (``src == pad_id``) is hidden from encoder self-attention
    and from cross-attention; target position t sees target positions <= t only.
    Embeddings are scaled by sqrt(d_model) and added to sinusoidal positions, as in the paper.

    Shape:
        src: (B, T_src) int64; tgt: (B, T) int64 (decoder input, BOS first) -> logits (B, T, tgt_vocab_size)
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int, num_heads: int,
                 num_layers: int, d_ff: int, dropout: float = 0.1, pad_id: int = 0, *,
                 norm_first: bool = False, max_len: int = 512):
        super().__init__()
        _check_positive(num_heads=num_heads)
        for name, v in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
            if isinstance(pad_id, bool) or not isinstance(pad_id, Integral) or not 0 <= pad_id < v:
                raise ValueError(f"pad_id={pad_id!r} must be a valid id of {name}={v}")
        self.pad_id, self.norm_first = int(pad_id), bool(norm_first)
        args = (d_model, num_heads, num_layers, d_ff, dropout, norm_first, pad_id, max_len)
        self.encoder = Encoder(src_vocab_size, *args)
        self.decoder = Decoder(tgt_vocab_size, *args)
        self.generator = nn.Linear(d_model, tgt_vocab_size)   # pre-softmax projection

    def source_mask(self, src: Tensor) -> Tensor:
        """Shape: src (B, T_src) -> (B, 1, 1, T_src) bool, True = real token (may be attended to)."""
        return padding_to_attention_mask(src != self.pad_id)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Shape: src (B, T_src) -> memory (B, T_src, D), source mask (B, 1, 1, T_src)."""
        src_mask = self.source_mask(src)
        memory, _ = self.encoder(src, src_mask)
        return memory, src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Shape: tgt (B, T), memory (B, T_src, D) -> logits (B, T, V)."""
        states, _, _ = self.decoder(tgt, memory, src_mask, cache)
        return self.generator(states)

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding (one KVCache per decoder layer)."""
        return DecoderCache([LayerCache() for _ in self.decoder.layers])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        if src.dim() != 2 or tgt.dim() != 2 or src.size(0) != tgt.size(0):
            raise ValueError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} must be (B, T_src) and (B, T) "
                             f"with the same B")
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)   # all T positions at once (teacher forcing)

    def attention_maps(self, src: Tensor, tgt: Tensor) -> dict[str, list[Tensor]]:
        """Every layer's attention weights for one forward pass (for plots).

        Shape: -> {"encoder": [(B, H, T_src, T_src)], "decoder_self": [(B, H, T, T)], "cross": [(B, H, T, T_src)]}
        """
        src_mask = self.source_mask(src)
        memory, enc_w = self.encoder(src, src_mask)
        _, self_w, cross_w = self.decoder(tgt, memory, src_mask)
        return {"encoder": enc_w, "decoder_self": self_w, "cross": cross_w}

"""Continuous batching (Yu et al., 2022, "Orca"; Kwon et al., 2023): sequences at different positions decoded in
one forward pass, each with its own positions and mask, their keys and values in a :class:`PagedKVCache`.

A server does not wait for a whole batch to finish: after every forward pass a sequence that is done frees its
blocks and a waiting one takes its place. :func:`paged_forward` is the pass; :class:`BatchScheduler` is the loop,
and it counts the cost in forward passes and tokens per pass (no timing).

Shape legend: B sequences in the pass, Tn_b new tokens of sequence b, V vocabulary, H / Hkv heads, Dh head size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral

import torch
from torch import Tensor

from .attention import scaled_dot_product_attention
from .multihead import merge_heads, repeat_kv, split_heads
from .paged_cache import OutOfBlocks, PagedKVCache
from .positional import apply_rotary

__all__ = ["paged_forward", "BatchScheduler", "Request"]


def _rotate(mha, x: Tensor, positions: Tensor) -> Tensor:
    """RoPE at each row's own positions (identity without rope). Shape: x (B, H, T, Dh), positions (B, T)."""
    return x if mha.rope_base is None else apply_rotary(x, positions[:, None, :], mha.rope_base)


@torch.no_grad()
def paged_forward(model, cache: PagedKVCache, seqs: list, new_ids: list[Tensor]) -> list[Tensor]:
    """One forward pass of a :class:`attnbook.DecoderOnlyLM` (eval mode) over several sequences at once.

    Sequence b feeds its new tokens ``new_ids[b]`` (a prompt, or the one token it sampled last), which sit at
    positions len_b .. len_b + Tn_b - 1 of that sequence. Rows are padded to the longest Tn; each query sees
    the keys of its own sequence up to its own position, read through the sequence's block table.

    Shape:
        new_ids: B tensors (Tn_b,) int64 -> B tensors of logits (Tn_b, V)
    """
    if len(seqs) != len(new_ids) or not seqs:
        raise ValueError(f"need one tensor of new ids per sequence, got {len(seqs)} sequences, {len(new_ids)} tensors")
    for ids in new_ids:
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.numel() == 0 or ids.dtype != torch.long:
            raise ValueError(f"each new_ids entry must be a non-empty 1-D int64 tensor, got {getattr(ids, 'shape', ids)!r}")
    if cache.num_layers != len(model.layers):
        raise ValueError(f"cache has {cache.num_layers} layers, the model {len(model.layers)}")
    dev = cache.pool_k.device
    n = [ids.numel() for ids in new_ids]
    B, T = len(seqs), max(n)
    ids = torch.zeros(B, T, dtype=torch.long, device=dev)
    for b, x in enumerate(new_ids):
        ids[b, :n[b]] = x
    starts = torch.tensor([cache.reserve(s, nb) for s, nb in zip(seqs, n)], device=dev)      # (B,)
    pos = starts[:, None] + torch.arange(T, device=dev)                                       # (B, T)
    tables = [cache.tables[s] for s in seqs]
    width = max(map(len, tables))
    table = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long, device=dev)   # (B, nb)
    real = torch.arange(T, device=dev) < torch.tensor(n, device=dev)[:, None]                 # (B, T) not padding
    S = cache.block_size
    # where each real new token goes: block table[b, pos // S], slot pos % S (all sequences at once)
    write_blocks = table.gather(1, (pos // S).clamp(max=width - 1))[real]                     # (n_real,)
    write_slots = (pos % S)[real]                                                             # (n_real,)
    key_pos = torch.arange(width * S, device=dev)                                             # (S_max,)
    # query (b, t) sees key j of its own sequence iff j <= pos[b, t] (padded rows see junk and are dropped)
    mask = key_pos <= pos[:, :, None]                                                         # (B, T, S_max)
    x = model.embed(ids)                                                                      # (B, T, D)
    for li, layer in enumerate(model.layers):
        mha = layer.self_attn
        h = layer._pre(x, layer.norm1)
        q = _rotate(mha, split_heads(mha.w_q(h), mha.num_heads), pos)                         # (B, H, T, Dh)
        k = _rotate(mha, split_heads(mha.w_k(h), mha.num_kv_heads), pos)                      # (B, Hkv, T, Dh)
        v = split_heads(mha.w_v(h), mha.num_kv_heads)
        # only the real tokens go into the cache; the indexed view pool[li][blocks, :, slots] is (n_real, Hkv, Dh)
        cache.pool_k[li][write_blocks, :, write_slots] = k.transpose(1, 2)[real]
        cache.pool_v[li][write_blocks, :, write_slots] = v.transpose(1, 2)[real]
        blocks_k, blocks_v = cache.pool_k[li][table], cache.pool_v[li][table]                 # (B, nb, Hkv, S, Dh)
        keys = blocks_k.transpose(1, 2).flatten(2, 3)                                         # (B, Hkv, S_max, Dh)
        values = blocks_v.transpose(1, 2).flatten(2, 3)
        n_rep = mha.num_heads // mha.num_kv_heads
        heads, _ = scaled_dot_product_attention(q, repeat_kv(keys, n_rep), repeat_kv(values, n_rep), mask[:, None])
        x = layer._post(x + layer.dropout1(mha.w_o(merge_heads(heads))), layer.norm1)
        x = layer._post(x + layer.dropout3(layer.ffn(layer._pre(x, layer.norm3))), layer.norm3)
    logits = model.lm_head(model.final_norm(x))                                               # (B, T, V)
    return [logits[b, :n[b]] for b in range(B)]


@dataclass
class Request:
    """A prompt and how many tokens to generate for it (greedy); ``output`` fills in as it runs."""
    name: object
    prompt: Tensor
    max_new_tokens: int
    output: list = field(default_factory=list)


class BatchScheduler:
    """Runs requests through :func:`paged_forward`, at most ``max_batch`` at a time, greedily decoded.

    ``continuous=True``: after every pass finished sequences free their blocks and waiting requests join (first
    come, first served) while a slot and enough free blocks for the prompt are there. ``continuous=False`` (static
    batching): new requests join only when the whole batch has finished. ``passes`` records, for every forward pass,
    (sequences in it, tokens fed).
    """

    def __init__(self, model, cache: PagedKVCache, max_batch: int, continuous: bool = True):
        if isinstance(max_batch, bool) or not isinstance(max_batch, Integral) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.model, self.cache, self.max_batch, self.continuous = model, cache, int(max_batch), continuous
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.done: list[Request] = []
        self.passes: list[tuple[int, int]] = []
        self.peak_blocks = 0

    def submit(self, request: Request) -> None:
        if request.max_new_tokens < 1 or request.prompt.dim() != 1 or request.prompt.numel() == 0:
            raise ValueError(f"request {request.name!r} needs a non-empty 1-D prompt and max_new_tokens >= 1")
        self.waiting.append(request)

    def _blocks_to_come(self, r: Request) -> int:
        """Blocks r will still allocate: its cache ends with prompt + max_new_tokens - 1 tokens."""
        final = -(-(r.prompt.numel() + r.max_new_tokens - 1) // self.cache.block_size)
        return final - (len(self.cache.tables[r.name]) if r.name in self.cache else 0)

    def _admit(self) -> None:
        """Admit waiting requests while a slot is free and the pool can hold every admitted request to its end
        (so no running sequence ever runs out of blocks: no preemption needed)."""
        if not self.continuous and self.running:
            return
        while self.waiting and len(self.running) < self.max_batch:
            req = self.waiting[0]
            promised = sum(self._blocks_to_come(r) for r in self.running)
            if promised + self._blocks_to_come(req) > len(self.cache.free_blocks):
                break                                                # wait until finished sequences free blocks
            self.cache.add(req.name)
            self.running.append(self.waiting.pop(0))

    def step(self) -> None:
        """Admit, run one forward pass, append each sequence's greedy token, retire the finished ones."""
        self._admit()
        if not self.running:
            raise OutOfBlocks("no request fits in the pool")
        sizes = [1 if r.output else r.prompt.numel() for r in self.running]   # prompt first, then one token a pass
        if self.model is None:                                       # count only: reserve the slots, compute nothing
            for r, n in zip(self.running, sizes):
                self.cache.reserve(r.name, n)
            chosen = [-1] * len(sizes)
        else:
            feed = [torch.tensor(r.output[-1:]) if r.output else r.prompt for r in self.running]
            logits = paged_forward(self.model, self.cache, [r.name for r in self.running],
                                   [f.to(self.cache.pool_k.device) for f in feed])
            chosen = [int(z[-1].argmax()) for z in logits]
        self.passes.append((len(self.running), sum(sizes)))
        self.peak_blocks = max(self.peak_blocks, self.cache.used_blocks())
        for r, c in zip(self.running, chosen):
            r.output.append(c)
        for r in [r for r in self.running if len(r.output) == r.max_new_tokens]:
            self.cache.free(r.name)                                   # its blocks go back to the free list
            self.running.remove(r)
            self.done.append(r)

    def run(self) -> list[Request]:
        """Step until every submitted request is done; return them in the order they finished."""
        while self.waiting or self.running:
            self.step()
        return self.done

"""Decoding a trained encoder-decoder: greedy, beam search, and incremental decoding with a KV cache.

Inference is serial: token t+1 depends on the token chosen at step t, so T tokens need T decoder
calls. Without a cache, call t re-encodes all t target tokens (O(t^2) attention per call); with a
:class:`attnbook.DecoderCache` it feeds only the newest token and attends to stored keys and values.

The model needs ``encode(src) -> (memory, src_mask)``, ``decode(tgt, memory, src_mask, cache=None)
-> logits`` and ``new_cache()``, as :class:`attnbook.Transformer` has. <pad> and <bos> are never
generated. Decoding runs in eval mode under ``torch.no_grad()`` (the model's mode is restored).

Shape legend: B batch, T_src source length, L generated length (<= max_len), k beam size, V vocabulary.
"""

from __future__ import annotations

import functools
from numbers import Integral

import torch
from torch import Tensor

__all__ = ["greedy_decode", "beam_search", "sequence_log_prob", "shift_right"]


def _eval_no_grad(fn):
    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return fn(model, *args, **kwargs)
        finally:
            model.train(was_training)
    return wrapper


def shift_right(tokens: Tensor, bos_id: int) -> Tensor:
    """The decoder's input for teacher forcing: <bos> y_1 … y_{L-1}, so position t predicts y_t.

    Shape: tokens (B, L) -> (B, L)
    """
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.size(1) == 0:
        got = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be a (B, L) tensor with L >= 1, got {got}")
    return torch.cat([torch.full_like(tokens[:, :1], bos_id), tokens[:, :-1]], 1)


def _check(src: Tensor, max_len, bos_id, eos_id, pad_id) -> None:
    if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype != torch.long or src.size(1) == 0:
        got = f"{src.dtype} {tuple(src.shape)}" if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be a (B, T_src) int64 tensor with T_src >= 1, got {got}")
    if isinstance(max_len, bool) or not isinstance(max_len, Integral) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
    if len({bos_id, eos_id, pad_id}) != 3:
        raise ValueError(f"bos_id={bos_id}, eos_id={eos_id}, pad_id={pad_id} must be distinct")


def _next_log_probs(logits: Tensor, bos_id: int, pad_id: int) -> Tensor:
    """log softmax over the vocabulary with <bos> and <pad> forbidden. Shape: (N, V) -> (N, V)."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32), copy=True)   # >= float32
    logits[:, [bos_id, pad_id]] = float("-inf")
    return torch.log_softmax(logits, -1)


def _after_first_eos(tokens: Tensor, eos_id: int) -> Tensor:
    """True strictly after the first <eos> of each row. Shape: (B, L) -> (B, L) bool."""
    eos = (tokens == eos_id).long()
    return eos.cumsum(1) - eos > 0


def _finish(tokens: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """Replace everything after the first <eos> with <pad>. Shape: (B, L) -> (B, L)."""
    return tokens.masked_fill(_after_first_eos(tokens, eos_id), pad_id)


@_eval_no_grad
def greedy_decode(model, src: Tensor, max_len: int, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0,
                  use_cache: bool = False, stop_at_eos: bool = True) -> tuple[Tensor, Tensor]:
    """Pick the most probable token at every step, up to ``max_len`` tokens or <eos>.

    ``use_cache=False`` re-runs the decoder on the whole prefix at every step (as training does, but
    L times); ``use_cache=True`` feeds only the newest token. Both give the same tokens.
    ``stop_at_eos=False`` always runs ``max_len`` steps (for timing).

    Shape:
        src: (B, T_src) -> tokens (B, L) with <pad> after <eos>, step logits (B, L, V).
    """
    _check(src, max_len, bos_id, eos_id, pad_id)
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1): <bos>
    cache = model.new_cache() if use_cache else None
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    step_logits = []
    for _ in range(max_len):
        new = ys if cache is None else ys[:, -1:]                  # (B, t) or (B, 1)
        logits = model.decode(new, memory, src_mask, cache)[:, -1]  # (B, V): the last position only
        step_logits.append(logits)
        nxt = _next_log_probs(logits, bos_id, pad_id).argmax(-1)    # (B,)
        ys = torch.cat([ys, nxt[:, None]], 1)                       # (B, t + 1)
        done |= nxt == eos_id
        if stop_at_eos and bool(done.all()):
            break
    return _finish(ys[:, 1:], eos_id, pad_id), torch.stack(step_logits, 1)


@_eval_no_grad
def beam_search(model, src: Tensor, beam_size: int, max_len: int, bos_id: int = 1, eos_id: int = 2,
                pad_id: int = 0, length_penalty: float = 0.0, use_cache: bool = False) -> tuple[Tensor, Tensor]:
    """Keep the ``beam_size`` best prefixes by total log-probability; return the best finished one.

    A hypothesis is finished when it emits <eos> (it then only extends with <pad>, at no cost) or
    after ``max_len`` tokens. The final choice divides each score by ((5 + length) / 6) ** alpha
    (Wu et al., 2016) with alpha = ``length_penalty``; 0 keeps the plain sum of log-probabilities.
    ``use_cache=False`` re-reads each beam's whole prefix at every step. ``use_cache=True`` feeds only
    the newest tokens and, after each step, reorders the cache so that row i holds the keys and values
    of beam i's parent. Both give the same result.

    Shape:
        src: (B, T_src) -> tokens (B, L) with <pad> after <eos>, scores (B,) (the normalised score).
    """
    _check(src, max_len, bos_id, eos_id, pad_id)
    if isinstance(beam_size, bool) or not isinstance(beam_size, Integral) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    b, k = src.size(0), int(beam_size)
    memory, src_mask = model.encode(src)
    memory = memory.repeat_interleave(k, 0)                        # (B*k, T_src, D): beams of example i together
    src_mask = src_mask.repeat_interleave(k, 0)                    # (B*k, 1, 1, T_src)
    ys = torch.full((b * k, 1), bos_id, dtype=torch.long, device=src.device)   # (B*k, 1)
    scores = torch.full((b, k), float("-inf"), dtype=torch.promote_types(memory.dtype, torch.float32),
                        device=src.device)
    scores[:, 0] = 0.0                                             # k identical <bos> beams: keep one
    finished = torch.zeros(b * k, dtype=torch.bool, device=src.device)
    lengths = torch.zeros_like(scores).reshape(-1)                 # (B*k,) tokens up to and including <eos>
    cache = model.new_cache() if use_cache else None
    for _ in range(max_len):
        new = ys if cache is None else ys[:, -1:]                  # (B*k, t) or (B*k, 1)
        logp = _next_log_probs(model.decode(new, memory, src_mask, cache)[:, -1], bos_id, pad_id)  # (B*k, V)
        v = logp.size(-1)
        # A finished beam has exactly one continuation, <pad>, costing nothing.
        logp[finished] = float("-inf")
        logp[finished, pad_id] = 0.0
        cand = (scores.reshape(-1, 1) + logp).reshape(b, k * v)    # (B, k*V) every one-token extension
        scores, flat = cand.topk(k, dim=-1)                        # (B, k) the k best, best first
        parent = flat // v + torch.arange(b, device=src.device)[:, None] * k   # (B, k) row in B*k
        token = (flat % v).reshape(-1)                             # (B*k,)
        parent = parent.reshape(-1)
        ys = torch.cat([ys[parent], token[:, None]], 1)           # (B*k, t + 1)
        if cache is not None:
            cache.reorder(parent)                                  # row i continues its parent's prefix
        lengths = lengths[parent] + (~finished[parent]).float()
        finished = finished[parent] | (token == eos_id)
        if bool(finished.all()):
            break
    final = scores / ((5.0 + lengths.reshape(b, k)) / 6.0) ** length_penalty   # (B, k)
    best = final.argmax(-1)                                        # (B,)
    rows = best + torch.arange(b, device=src.device) * k
    return _finish(ys[rows, 1:], eos_id, pad_id), final.gather(1, best[:, None]).squeeze(1)


@_eval_no_grad
def sequence_log_prob(model, src: Tensor, tokens: Tensor, bos_id: int = 1, eos_id: int = 2,
                      pad_id: int = 0) -> Tensor:
    """log P(tokens | src) under the decoding rules (<bos>/<pad> forbidden), up to the first <eos>.

    One teacher-forced pass scores every position at once.

    Shape:
        src: (B, T_src), tokens: (B, L) -> (B,)
    """
    logits = model(src, shift_right(tokens, bos_id))                                  # (B, L, V)
    logp = _next_log_probs(logits.reshape(-1, logits.size(-1)), bos_id, pad_id)
    picked = logp.gather(1, tokens.reshape(-1, 1)).reshape(tokens.shape)              # (B, L)
    keep = ~_after_first_eos(tokens, eos_id)                                          # up to first EOS
    return torch.where(keep, picked, torch.zeros_like(picked)).sum(1)   # -inf at forbidden pads dropped

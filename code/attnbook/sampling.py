"""Choosing the next token from a language model's logits: greedy, temperature, top-k, top-p (nucleus).

Each filter maps logits to logits, setting the tokens it drops to -inf, so they compose; the
distribution sampled from is softmax of what is left, i.e. the kept tokens' probabilities renormalised:

    temperature T:  z / T                         (T -> 0: greedy, T = 1: the model, T > 1: flatter)
    top-k:          keep the k largest logits
    top-p:          keep the smallest set of most probable tokens whose probability reaches p
                    (Holtzman et al., 2020)

Combined in the order temperature -> top-k -> top-p, as Hugging Face ``transformers`` applies its
warpers. Ties at a boundary are kept together: top-k keeps every token tied with the k-th largest
logit, top-p every token as probable as the least probable one it needs, so the kept set depends on
the probabilities only, never on how a sort orders equal values. Without ties at its boundary top-p's set
is the smallest one and equals transformers' ``TopPLogitsWarper``; with ties it is larger (0.4, 0.2, 0.2,
0.2 at p = 0.5: all four, where the warper keeps 0.4 and whichever 0.2 its sort puts last).

Shape legend: ``...`` any leading dimensions (e.g. B), V vocabulary. Logits may hold -inf (forbidden
tokens) but not NaN or +inf, and every row needs one finite logit.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import Tensor

__all__ = ["apply_temperature", "top_k_filter", "top_p_filter", "filter_logits", "sampling_probs",
           "sample_next", "greedy_next"]


def _check_logits(logits: Tensor) -> None:
    if not isinstance(logits, Tensor) or not logits.is_floating_point() or logits.dim() < 1 or logits.size(-1) < 1:
        got = f"{logits.dtype} {tuple(logits.shape)}" if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a floating-point tensor of shape (..., V) with V >= 1, got {got}")
    if torch.isnan(logits).any() or (logits == math.inf).any():
        raise ValueError(f"logits of shape {tuple(logits.shape)} hold NaN or +inf")
    if not torch.isfinite(logits).any(-1).all():
        raise ValueError(f"a row of the logits (shape {tuple(logits.shape)}) is all -inf: nothing to choose from")


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """z / T for T > 0. Shape: (..., V) -> (..., V)."""
    _check_logits(logits)
    if isinstance(temperature, bool) or not isinstance(temperature, Real) or not 0 < temperature < math.inf:
        raise ValueError(f"temperature must be a finite number > 0 (use greedy_next for T -> 0), got {temperature!r}")
    return logits / temperature


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row (and any tied with the k-th), set the rest to -inf.

    Shape: (..., V) -> (..., V); k >= V keeps everything.
    """
    _check_logits(logits)
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"top-k needs an integer k >= 1, got {k!r}")
    if k >= logits.size(-1):
        return logits.clone()
    kth = logits.topk(int(k), dim=-1).values[..., -1:]           # (..., 1) the k-th largest logit
    return logits.masked_fill(logits < kth, -math.inf)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose total probability reaches p (0 < p <= 1).

    Sorted by probability, p_(1) >= p_(2) >= ..., the set is p_(1), ..., p_(m) with m the smallest
    index where p_(1) + ... + p_(m) >= p; every token as probable as p_(m) is kept too (ties).

    Shape: (..., V) -> (..., V), dropped tokens -inf.
    """
    _check_logits(logits)
    if isinstance(p, bool) or not isinstance(p, Real) or not 0 < p <= 1:
        raise ValueError(f"top-p needs a probability 0 < p <= 1, got {p!r}")
    if p == 1:
        return logits.clone()
    probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    sorted_p = probs.sort(dim=-1, descending=True).values         # (..., V)
    before = sorted_p.cumsum(-1) - sorted_p                        # mass of the more probable tokens
    m = (before < p).sum(-1, keepdim=True)                         # (..., 1) tokens needed, >= 1
    threshold = sorted_p.gather(-1, m - 1)                         # p_(m)
    return logits.masked_fill(probs < threshold, -math.inf)


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> Tensor:
    """Temperature, then top-k, then top-p (each skipped when None). Shape: (..., V) -> (..., V)."""
    out = apply_temperature(logits, temperature)
    if top_k is not None:
        out = top_k_filter(out, top_k)
    if top_p is not None:
        out = top_p_filter(out, top_p)
    return out


def sampling_probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> Tensor:
    """The distribution the next token is drawn from: softmax of :func:`filter_logits`, in float32 or wider.

    ``temperature=0`` is greedy decoding: probability 1 on the first largest logit.

    Shape: (..., V) -> (..., V), rows summing to 1.
    """
    if isinstance(temperature, Real) and not isinstance(temperature, bool) and temperature == 0:
        _check_logits(logits)
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).to(
            torch.promote_types(logits.dtype, torch.float32))
    out = filter_logits(logits, temperature, top_k, top_p)
    return torch.softmax(out.to(torch.promote_types(out.dtype, torch.float32)), dim=-1)


def greedy_next(logits: Tensor) -> Tensor:
    """The most probable token of each row (the first one on ties). Shape: (..., V) -> (...) int64."""
    _check_logits(logits)
    return logits.argmax(-1)


def sample_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                generator: torch.Generator | None = None) -> Tensor:
    """Draw one token per row from :func:`sampling_probs` (``temperature=0``: greedy).

    Shape: (..., V) -> (...) int64.
    """
    probs = sampling_probs(logits, temperature, top_k, top_p)
    flat = probs.reshape(-1, probs.size(-1))                       # (N, V)
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])

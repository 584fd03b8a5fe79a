"""Boolean attention masks: True = the query may attend to the key (as torch SDPA).

``nn.MultiheadAttention`` uses the opposite convention (True = blocked) for both its
``attn_mask`` and ``key_padding_mask``: pass ``~mask`` there.
"""

from __future__ import annotations

from numbers import Integral

import torch
from torch import Tensor

__all__ = ["causal_mask", "padding_mask", "padding_to_attention_mask", "combine_masks"]


def _check_length(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {n!r}")
    return int(n)


def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular mask: query i may attend to keys j <= i (no peeking ahead).

    Formula: M_ij = (j <= i)

    Shape:
        -> (n, n) torch.bool; broadcasts against scores (..., n, n).
    """
    n = _check_length(n, "n")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, max_len: int | None = None) -> Tensor:
    """Which positions of a right-padded batch hold real tokens.

    ``lengths`` is a sequence or 1-D integer tensor of true lengths; ``max_len``
    defaults to max(lengths). The device follows ``lengths`` when it is a tensor.

    Formula: M_bt = (t < lengths_b)

    Shape:
        lengths: (B,) -> (B, max_len) torch.bool, True = real token.
    """
    if not isinstance(lengths, Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype.is_complex \
            or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer sequence, got shape {tuple(lengths.shape)} "
                         f"and dtype {lengths.dtype}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else _check_length(max_len, "max_len")
    if longest > max_len:
        raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({longest})")
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)       # (1, T) < (B, 1) -> (B, T)


def padding_to_attention_mask(padding: Tensor, heads: bool = True) -> Tensor:
    """Turn a key-padding mask (B, Tk) into an attention mask that hides padded keys.

    Every query keeps the same row, so the mask broadcasts over queries (and heads).

    Shape:
        padding: (B, Tk) bool, True = real token
        -> (B, 1, 1, Tk) when ``heads`` (for scores (B, H, Tq, Tk)), else (B, 1, Tk).
    """
    if not isinstance(padding, Tensor) or padding.dtype != torch.bool or padding.dim() != 2:
        got = (f"{padding.dtype} tensor of shape {tuple(padding.shape)}" if isinstance(padding, Tensor)
               else type(padding).__name__)
        raise ValueError(f"padding must be a (B, Tk) torch.bool tensor, got {got}")
    out = padding.unsqueeze(1)                    # (B, 1, Tk): same for every query
    return out.unsqueeze(1) if heads else out     # (B, 1, 1, Tk)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks with broadcasting; ``None`` entries are skipped.

    E.g. combine_masks(causal_mask(T), padding_to_attention_mask(pad)) -> (B, 1, T, T).

    Shape:
        masks broadcastable to one another -> their broadcast shape; None if all are None.
    """
    present = [m for m in masks if m is not None]
    for m in present:
        if not isinstance(m, Tensor) or m.dtype != torch.bool:
            got = m.dtype if isinstance(m, Tensor) else type(m).__name__
            raise ValueError(f"masks must be torch.bool tensors (True = may attend), got {got}")
    if not present:
        return None
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"masks of shapes {shapes} do not broadcast together") from None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out

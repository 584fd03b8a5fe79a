"""Absolute position encodings: sinusoidal (Vaswani et al., 2017), learned, and rotary (RoPE, Su et al.).

Sinusoidal encoding of position ``pos`` in ``d_model`` features, with frequencies
``w_i = base^(-2i / d_model)`` for ``i = 0, 1, ..., ceil(d_model / 2) - 1``:

    PE(pos, 2i)     = sin(pos * w_i)
    PE(pos, 2i + 1) = cos(pos * w_i)

Positions run over 0, 1, ..., max_len - 1 and feature indices over 0, ..., d_model - 1.
For odd ``d_model`` the last feature is a sine with no cosine partner.

Rotary embedding rotates each adjacent feature pair (2i, 2i+1) of a query or key by the angle
``pos * w_i`` (same frequencies, ``d_model`` = head size), so <rot(q, m), rot(k, n)> depends on m - n only.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "sinusoidal_frequencies",
    "sinusoidal_encoding_at",
    "sinusoidal_encoding",
    "sinusoidal_encoding_loop",
    "sinusoidal_shift_matrix",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "apply_rotary",
]


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    return float(base)


def sinusoidal_frequencies(d_model: int, base: float = 10000.0, device=None) -> Tensor:
    """Angular frequencies w_i = base^(-2i / d_model), i = 0 .. ceil(d_model / 2) - 1, in float64.

    Shape:
        -> (ceil(d_model / 2),)
    """
    _check_int(d_model, "d_model", 1)
    base = _check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # 0, 2, 4, ...
    return torch.exp(-math.log(base) * two_i / d_model)  # base^(-2i/d), computed as exp for accuracy


def sinusoidal_encoding_at(positions: Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """Sinusoidal encoding of arbitrary (integer or real, also negative) positions.

    Angles are formed in float64 (pos * w_i loses digits in float32 once pos is large) and the
    result is returned in positions' dtype if floating, else float32.

    Shape:
        positions: (...) -> (..., d_model)
    """
    if not isinstance(positions, Tensor):
        raise ValueError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    out_dtype = positions.dtype if positions.is_floating_point() else torch.float32
    w = sinusoidal_frequencies(d_model, base, device=positions.device)  # (ceil(d/2),)
    angle = positions.to(torch.float64).unsqueeze(-1) * w  # (..., ceil(d/2))
    pe = torch.empty(*positions.shape, d_model, dtype=torch.float64, device=positions.device)
    pe[..., 0::2] = torch.sin(angle)  # even features: ceil(d/2) sines
    pe[..., 1::2] = torch.cos(angle[..., : d_model // 2])  # odd features: floor(d/2) cosines
    return pe.to(out_dtype)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0, *,
                        dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """The sinusoidal table of Vaswani et al. (2017) for positions 0 .. max_len - 1, vectorised.

    Correct for odd d_model (the last feature is a sine), unlike the usual
    ``pe[:, 1::2] = cos(position * div_term)``, which then mismatches shapes.

    Shape:
        -> (max_len, d_model)
    """
    _check_int(max_len, "max_len", 0)
    positions = torch.arange(max_len, dtype=torch.float64, device=device)  # (max_len,)
    return sinusoidal_encoding_at(positions, d_model, base).to(dtype)


def sinusoidal_encoding_loop(max_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The same table entry by entry with Python loops and ``math.sin``/``math.cos`` (slow, for comparison).

    Shape:
        -> (max_len, d_model), float32
    """
    _check_int(max_len, "max_len", 0)
    _check_int(d_model, "d_model", 1)
    base = _check_base(base)
    rows = []
    for pos in range(max_len):
        row = []
        for j in range(d_model):
            angle = pos / base ** (2 * (j // 2) / d_model)  # features 2i and 2i+1 share w_i
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32).reshape(max_len, d_model)


def sinusoidal_shift_matrix(k: float, d_model: int, base: float = 10000.0, *,
                            dtype: torch.dtype = torch.float64, device=None) -> Tensor:
    """The matrix M_k with PE(pos + k) = M_k PE(pos) for every pos; it does not depend on pos.

    Block diagonal with one 2x2 rotation per frequency, since
    sin(w(p+k)) = sin(wp)cos(wk) + cos(wp)sin(wk) and cos(w(p+k)) = cos(wp)cos(wk) - sin(wp)sin(wk):

        [sin]      [ cos wk   sin wk] [sin]
        [cos]  <-  [-sin wk   cos wk] [cos]

    Needs even d_model: an unpaired last sine has no cosine partner to rotate with.

    Shape:
        -> (d_model, d_model)
    """
    _check_int(d_model, "d_model", 2)
    if d_model % 2:
        raise ValueError(f"d_model={d_model} is odd: the last sine feature has no cosine partner, "
                         "so no linear map sends PE(pos) to PE(pos + k)")
    c = torch.cos(k * sinusoidal_frequencies(d_model, base, device=device))  # (d/2,)
    s = torch.sin(k * sinusoidal_frequencies(d_model, base, device=device))  # (d/2,)
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype)  # (d, d)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to its input; any length works, nothing is learned.

    Shape:
        x: (..., T, D) -> (..., T, D)
    """

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        self.d_model = _check_int(d_model, "d_model", 1)
        self.base = _check_base(base)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.size(-1) != self.d_model:
            raise ValueError(f"x of shape {tuple(x.shape)} must be (..., T, {self.d_model})")
        pe = sinusoidal_encoding(x.size(-2), self.d_model, self.base, dtype=x.dtype, device=x.device)
        return x + pe  # (T, D) broadcasts over the leading dims


class LearnedPositionalEmbedding(nn.Module):
    """A trainable vector per absolute position 0 .. max_len - 1, added to the input (BERT, GPT-2).

    The table has exactly max_len rows: a longer sequence raises ValueError instead of failing
    later with a broadcasting error.

    Shape:
        x: (..., T, D) with T <= max_len -> (..., T, D); weight: (max_len, D)
    """

    def __init__(self, max_len: int, d_model: int, init_std: float = 0.02):
        super().__init__()
        self.max_len = _check_int(max_len, "max_len", 1)
        self.d_model = _check_int(d_model, "d_model", 1)
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * init_std)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.size(-1) != self.d_model:
            raise ValueError(f"x of shape {tuple(x.shape)} must be (..., T, {self.d_model})")
        T = x.size(-2)
        if T > self.max_len:
            raise ValueError(f"sequence length T={T} exceeds max_len={self.max_len}: a learned table "
                             f"has no row for positions {self.max_len}..{T - 1}")
        return x + self.weight[:T]  # (T, D) broadcasts over the leading dims


def apply_rotary(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (RoPE, Su et al.): rotate feature pair (2i, 2i+1) by angle pos * w_i.

    Formula: y_2i   = x_2i cos(pos w_i) - x_2i+1 sin(pos w_i)
             y_2i+1 = x_2i sin(pos w_i) + x_2i+1 cos(pos w_i),   w_i = base^(-2i/D)

    Adjacent pairs as in the paper (Llama's ``rotate_half`` pairs i with i + D/2 instead: the same
    rotation after a fixed permutation of features). Angles in float64, the rotation in x's dtype
    (float32 for half precision); result in x's dtype.

    Shape:
        x: (..., T, D), D even; positions: (T,) or broadcastable to (..., T), default 0 .. T-1
        -> (..., T, D)
    """
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 2:
        raise ValueError(f"x must be a floating tensor of shape (..., T, D), got "
                         f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"apply_rotary needs an even feature size D to form pairs, got x of shape "
                         f"{tuple(x.shape)} (D={D})")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    elif not isinstance(positions, Tensor) or positions.dim() == 0 or positions.size(-1) != T:
        got = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
        raise ValueError(f"positions of shape {got} must end in T={T} to match x of shape {tuple(x.shape)}")
    w = sinusoidal_frequencies(D, base, device=x.device)  # (D/2,)
    angle = positions.to(device=x.device, dtype=torch.float64).unsqueeze(-1) * w  # (..., T, D/2)
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    cos, sin = torch.cos(angle).to(work), torch.sin(angle).to(work)
    pairs = x.to(work).unflatten(-1, (D // 2, 2))  # (..., T, D/2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]  # (..., T, D/2) each
    y = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)  # (..., T, D/2, 2)
    return y.flatten(-2).to(x.dtype)  # (..., T, D)

"""Stretching RoPE to longer contexts: position interpolation, dynamic NTK scaling and YaRN.

RoPE rotates feature pair i by the angle pos * w_i with w_i = base^(-2i/D) (:mod:`attnbook.positional`).
A model trained on positions < L meets unseen angles beyond L. Each method changes the frequencies w_i
(and YaRN also the attention temperature) so that a longer context maps onto angles seen in training:

- position interpolation (Chen et al., 2023): w_i / s, i.e. positions squeezed by the factor s;
- dynamic NTK: a larger base grown with the current length T. Two rules are in use: transformers'
  ``dynamic`` rope type, base * (s T / L - (s - 1))^(D / (D - 2)), and the YaRN paper's, which takes the
  scale s = max(1, T / L) itself, base * (T / L)^(D / (D - 2)) (``rule="paper"``);
- YaRN (Peng et al., 2023): per frequency, interpolate (w_i / s) the slow ones, keep (w_i) the fast ones,
  a linear ramp between; and scale q and k by 0.1 ln s + 1 (so the scores by its square). transformers
  (and the authors' reference code) ramp over the pair *index*; the paper ramps over the number of turns
  (``ramp="turns"``);
- keep-first: keep w_0, divide every other frequency by s (a control: YaRN's frequencies on a head whose
  ramp ends at the second pair, without YaRN's temperature).

Every function returns ``(inv_freq, attention_factor)`` as ``transformers.modeling_rope_utils`` does;
frequencies in float64. :func:`apply_rotary_frequencies` applies them with the pairing of
:func:`attnbook.positional.apply_rotary` (adjacent pairs), which it equals for unscaled frequencies.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .positional import sinusoidal_frequencies

__all__ = [
    "rope_frequencies",
    "linear_scaling",
    "dynamic_ntk_scaling",
    "yarn_mscale",
    "yarn_scaling",
    "keep_first_scaling",
    "SCALINGS",
    "CONTROLS",
    "scaled_frequencies",
    "apply_rotary_frequencies",
    "score_vs_distance",
]


def _check_dim(dim) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
        raise ValueError(f"dim (the rotated head size) must be an even integer >= 2, got {dim!r}")
    return dim


def _check_factor(factor) -> float:
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) \
            or factor < 1:
        raise ValueError(f"factor must be a finite number >= 1, got {factor!r}")
    return float(factor)


def _check_length(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return n


def rope_frequencies(dim: int, base: float = 10000.0, device=None) -> Tensor:
    """Unscaled RoPE frequencies w_i = base^(-2i/dim), float64.

    Shape:
        -> (dim / 2,)
    """
    return sinusoidal_frequencies(_check_dim(dim), base, device=device)


def linear_scaling(dim: int, base: float, factor: float, device=None) -> tuple[Tensor, float]:
    """Position interpolation: w_i / s, the same as feeding positions pos / s.

    Shape:
        -> inv_freq (dim / 2,) float64, attention_factor 1.0
    """
    return rope_frequencies(dim, base, device) / _check_factor(factor), 1.0


def dynamic_ntk_scaling(dim: int, base: float, factor: float, max_position: int,
                        seq_len: int | None = None, device=None, *, rule: str = "transformers"
                        ) -> tuple[Tensor, float]:
    """Dynamic NTK-aware scaling: the base grows with the current length T = max(seq_len, L).

    Formula (``rule="transformers"``, the ``dynamic`` rope type):
        base' = base * (s T / L - (s - 1))^(dim / (dim - 2))
    Formula (``rule="paper"``, Peng et al. 2023, sec. 3.3: the scale is s' = max(1, T / L); ``factor``
    is not used): base' = base * (T / L)^(dim / (dim - 2))
    w_i = base'^(-2i/dim). At T = L, base' = base under both rules (nothing changes inside the training
    length); the lowest frequency is then divided by exactly s T / L - (s - 1) (transformers) or T / L
    (paper), the highest (i = 0) stays 1. At T = 4L with s = 4: 13 against 4.

    Shape:
        -> inv_freq (dim / 2,) float64, attention_factor 1.0
    """
    dim, factor = _check_dim(dim), _check_factor(factor)
    if dim < 4:  # the exponent dim / (dim - 2): one pair has only w_0 = 1, which no base changes
        raise ValueError(f"dynamic NTK scaling needs dim >= 4 (dim / (dim - 2) is undefined at 2), got {dim}")
    if rule not in ("transformers", "paper"):
        raise ValueError(f"rule must be 'transformers' or 'paper', got {rule!r}")
    L = _check_length(max_position, "max_position")
    T = L if seq_len is None else max(_check_length(seq_len, "seq_len"), L)
    scale = (factor * T / L) - (factor - 1) if rule == "transformers" else T / L
    new_base = base * scale ** (dim / (dim - 2))
    return rope_frequencies(dim, new_base, device), 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention factor 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1).

    Shape:
        -> float
    """
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_scaling(dim: int, base: float, factor: float, original_max_position: int, *,
                 beta_fast: float = 32.0, beta_slow: float = 1.0, mscale: float | None = None,
                 mscale_all_dim: float | None = None, attention_factor: float | None = None,
                 truncate: bool = True, ramp: str = "index", device=None) -> tuple[Tensor, float]:
    """YaRN: interpolate low frequencies, keep high ones, ramp between; plus an attention temperature.

    Pair i turns L * w_i / (2 pi) times over the training length L. Pairs turning more than
    beta_fast times keep w_i (extrapolate: they have seen every angle); pairs turning fewer than
    beta_slow times get w_i / s (interpolate); between, the dimension index is ramped linearly:

        d(r) = dim * ln(L / (2 pi r)) / (2 ln base)        (the pair index that turns r times)
        low, high = d(beta_fast), d(beta_slow)    (floored / ceiled when ``truncate``), clipped to [0, dim-1]
        ramp_i = clamp((i - low) / (high - low), 0, 1)
        w'_i = w_i / s * ramp_i + w_i * (1 - ramp_i)
        attention_factor = mscale(s, mscale) / mscale(s, mscale_all_dim) if both given,
                           else 0.1 ln s + 1       (cos and sin are multiplied by it)

    That is transformers' ``_compute_yarn_parameters`` (``ramp="index"``). The paper (Peng et al.
    2023, sec. 3.2, "NTK-by-parts") ramps over the turns instead (``ramp="turns"``; ``truncate`` not used):

        rho_i = L w_i / (2 pi);  keep_i = clamp((rho_i - beta_slow) / (beta_fast - beta_slow), 0, 1)
        w'_i = keep_i * w_i + (1 - keep_i) * w_i / s

    Shape:
        -> inv_freq (dim / 2,) float64, attention_factor (float)
    """
    dim, factor = _check_dim(dim), _check_factor(factor)
    L = _check_length(original_max_position, "original_max_position")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)

    if ramp not in ("index", "turns"):
        raise ValueError(f"ramp must be 'index' or 'turns', got {ramp!r}")
    w = rope_frequencies(dim, base, device)
    if ramp == "turns":
        keep = ((L * w / (2 * math.pi) - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)   # 1: keep w_i
        return w * keep + w / factor * (1 - keep), float(attention_factor)

    def pair_turning(r: float) -> float:  # the (real) pair index that turns r times over L
        return dim * math.log(L / (r * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001                                   # avoid dividing by zero (as transformers)
    i = torch.arange(dim // 2, dtype=torch.float64, device=device)
    interp = ((i - low) / (high - low)).clamp(0, 1)     # 0: keep w_i, 1: interpolate w_i / s
    return w / factor * interp + w * (1 - interp), float(attention_factor)


def keep_first_scaling(dim: int, base: float, factor: float, device=None) -> tuple[Tensor, float]:
    """A control: keep the fastest frequency w_0 = 1, divide all the others by s (no temperature).

    Shape:
        -> inv_freq (dim / 2,) float64, attention_factor 1.0
    """
    w = rope_frequencies(dim, base, device)
    factor = _check_factor(factor)
    return torch.cat([w[:1], w[1:] / factor]), 1.0


SCALINGS = ("none", "linear", "dynamic_ntk", "yarn")
# the paper's dynamic NTK rule, the paper's YaRN ramp (over turns), and keep-first (see the module docstring)
CONTROLS = ("dynamic_ntk_paper", "yarn_paper", "keep_first")


def scaled_frequencies(method: str, dim: int, base: float, factor: float, original_max_position: int,
                       seq_len: int | None = None, device=None) -> tuple[Tensor, float]:
    """One of :data:`SCALINGS` or :data:`CONTROLS` by name, for a model trained on positions
    < original_max_position (``seq_len``: the current length, used by dynamic NTK only; "none": the
    unscaled frequencies).

    Shape:
        -> inv_freq (dim / 2,) float64, attention_factor (float)
    """
    if method == "none":
        return rope_frequencies(dim, base, device), 1.0
    if method == "linear":
        return linear_scaling(dim, base, factor, device)
    if method == "dynamic_ntk":
        return dynamic_ntk_scaling(dim, base, factor, original_max_position, seq_len, device)
    if method == "yarn":
        return yarn_scaling(dim, base, factor, original_max_position, device=device)
    if method == "dynamic_ntk_paper":
        return dynamic_ntk_scaling(dim, base, factor, original_max_position, seq_len, device, rule="paper")
    if method == "yarn_paper":
        return yarn_scaling(dim, base, factor, original_max_position, ramp="turns", device=device)
    if method == "keep_first":
        return keep_first_scaling(dim, base, factor, device)
    raise ValueError(f"method must be one of {SCALINGS + CONTROLS}, got {method!r}")


def apply_rotary_frequencies(x: Tensor, inv_freq: Tensor, positions: Tensor | None = None,
                             attention_factor: float = 1.0) -> Tensor:
    """RoPE with given frequencies: rotate pair (2i, 2i+1) by pos * inv_freq_i, times attention_factor.

    With inv_freq = rope_frequencies(D, base) and factor 1 this is
    :func:`attnbook.positional.apply_rotary`; scaling q and k by a each scales the scores by a^2.

    Shape:
        x: (..., T, D), D even; inv_freq: (D / 2,); positions: (T,) or broadcastable to (..., T),
        default 0 .. T-1 -> (..., T, D), x's dtype
    """
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 2 or x.size(-1) % 2:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating tensor of shape (..., T, D) with D even, got {got}")
    T, D = x.shape[-2:]
    if not isinstance(inv_freq, Tensor) or inv_freq.shape != (D // 2,):
        got = tuple(inv_freq.shape) if isinstance(inv_freq, Tensor) else type(inv_freq).__name__
        raise ValueError(f"inv_freq of shape {got} must be (D/2,) = ({D // 2},) for x of shape {tuple(x.shape)}")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    elif not isinstance(positions, Tensor) or positions.dim() == 0 or positions.size(-1) != T:
        got = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
        raise ValueError(f"positions of shape {got} must end in T={T} to match x of shape {tuple(x.shape)}")
    w = inv_freq.to(device=x.device, dtype=torch.float64)
    angle = positions.to(device=x.device, dtype=torch.float64).unsqueeze(-1) * w   # (..., T, D/2)
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    cos = (torch.cos(angle) * attention_factor).to(work)
    sin = (torch.sin(angle) * attention_factor).to(work)
    pairs = x.to(work).unflatten(-1, (D // 2, 2))                                  # (..., T, D/2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    y = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)           # (..., T, D/2, 2)
    return y.flatten(-2).to(x.dtype)


def score_vs_distance(inv_freq: Tensor, distances: Tensor, attention_factor: float = 1.0) -> Tensor:
    """The score between a query and a key that are both all ones, rotated at positions i and i - d.

    Each pair (1, 1) has squared length 2 and the two rotations differ by the angle d w_i, so
    Formula: s(d) = 2 a^2 sum_i cos(d w_i)     (= dim a^2 at d = 0; a = attention_factor)
    The curve RoPE's frequencies draw as the distance grows (what each scaling stretches).

    Shape:
        inv_freq: (dim / 2,); distances: (...) -> (...) float64
    """
    if not isinstance(inv_freq, Tensor) or inv_freq.dim() != 1 or not isinstance(distances, Tensor):
        got = tuple(inv_freq.shape) if isinstance(inv_freq, Tensor) else type(inv_freq).__name__
        raise ValueError(f"inv_freq must be a 1-D tensor (dim/2,) and distances a tensor, got inv_freq {got}")
    angle = distances.to(torch.float64).unsqueeze(-1) * inv_freq.to(device=distances.device, dtype=torch.float64)
    return 2 * attention_factor ** 2 * torch.cos(angle).sum(-1)

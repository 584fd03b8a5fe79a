"""The RoPE-scaling widget: pick a method (none, position interpolation, NTK, YaRN), drag the scale factor s,
watch each pair's rotation frequency and the score-vs-distance curve out to s times the training length."""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..rope_scaling import SCALINGS, rope_frequencies, scaled_frequencies, score_vs_distance
from .static import StaticFallbackWidget, is_number

MAX_POINTS = 512  # the curve: every integer distance up to this many, else this many evenly spaced


class RopeScalingWidget(StaticFallbackWidget):
    """RoPE frequencies of one head and the score they give against the distance, under a chosen scaling.

    A model trained on length L meets a sequence of length T = ceil(s L). The frequencies w'_i and the
    attention factor a are :func:`attnbook.scaled_frequencies` ``(method, D, base, s, L, seq_len=T)``:

    - ``none``: w_i = base^(-2i/D), a = 1;
    - ``linear`` (position interpolation): every w_i / s;
    - ``dynamic_ntk``: base * (s T / L - (s - 1))^(D/(D-2)): the fastest pair (w_0 = 1) kept, the slowest
      divided by s T / L - (s - 1);
    - ``yarn``: w_i kept, w_i / s, or a ramp between (its defaults), a = 0.1 ln s + 1;

    and the curve :func:`score_vs_distance` ``(w', d, a)`` for d = 0 .. T. The browser redoes this
    arithmetic (``rope_scaling_explorer.js``), so the controls work on the static page; in a kernel
    ``method`` and ``factor`` are synced traits (set both, checked, with :meth:`set_controls`).

    Shape: D (``dim``) even >= 4; frequencies (D/2,); curve (min(T, 512) + 1,).
    """

    _esm_file = "rope_scaling_explorer.js"
    title = "拉长 RoPE：频率与分数曲线"

    dim = t.Int(8).tag(sync=True)
    base = t.Float(10000.0).tag(sync=True)
    train_len = t.Int(16).tag(sync=True)
    factor_max = t.Float(16.0).tag(sync=True)
    method = t.Unicode("yarn").tag(sync=True)
    factor = t.Float(4.0).tag(sync=True)

    def __init__(self, dim: int = 8, base: float = 10000.0, train_len: int = 16, method: str = "yarn",
                 factor: float = 4.0, factor_max: float = 16.0):
        if isinstance(dim, bool) or not isinstance(dim, Integral) or dim < 4 or dim % 2:
            raise ValueError(f"dim (the rotated head size) must be an even integer >= 4, got {dim!r}")
        if not (is_number(base) and math.isfinite(base) and base > 1):
            raise ValueError(f"base must be a finite number > 1, got {base!r}")
        if isinstance(train_len, bool) or not isinstance(train_len, Integral) or train_len < 1:
            raise ValueError(f"train_len must be a positive integer, got {train_len!r}")
        if not (is_number(factor_max) and 1 < factor_max <= 1024):
            raise ValueError(f"factor_max must be a number in (1, 1024], got {factor_max!r}")
        super().__init__(dim=int(dim), base=float(base), train_len=int(train_len), factor_max=float(factor_max))
        self.set_controls(method, factor)

    def set_controls(self, method: str, factor: float) -> None:
        """Pick the method (one of ``rope_scaling.SCALINGS``) and s in [1, factor_max]; both are checked first."""
        if method not in SCALINGS:
            raise ValueError(f"method must be one of {SCALINGS}, got {method!r}")
        if not (is_number(factor) and 1 <= factor <= self.factor_max):
            raise ValueError(f"factor must be a number in [1, {self.factor_max}], got {factor!r}")
        with self.hold_sync():                           # one update message to the page, not two
            self.method, self.factor = method, float(factor)

    @t.validate("method")
    def _valid_method(self, proposal):                 # also when set directly (w.method = ...)
        if proposal["value"] not in SCALINGS:
            raise ValueError(f"method must be one of {SCALINGS}, got {proposal['value']!r}")
        return proposal["value"]

    @t.validate("factor")
    def _valid_factor(self, proposal):
        if not 1 <= proposal["value"] <= self.factor_max:
            raise ValueError(f"factor must be a number in [1, {self.factor_max}], got {proposal['value']!r}")
        return proposal["value"]

    def length(self) -> int:
        """T = ceil(s L), the length the scaling is for (the curve's last distance)."""
        return math.ceil(self.factor * self.train_len)

    def frequencies(self) -> tuple[torch.Tensor, float]:
        """(inv_freq, attention_factor) of the current method at length T. Shape: (D/2,), float."""
        return scaled_frequencies(self.method, self.dim, self.base, self.factor, self.train_len, seq_len=self.length())

    def distances(self) -> torch.Tensor:
        """The curve's distances j T / (n - 1), j = 0 .. n - 1, n = min(T, 512) + 1. Shape: (n,) float64."""
        T = self.length()
        n = min(T, MAX_POINTS) + 1
        return torch.arange(n, dtype=torch.float64) * T / (n - 1)

    def scores(self, scaled: bool = True) -> torch.Tensor:
        """score_vs_distance at :meth:`distances`, with the current method's (or the unscaled) frequencies."""
        inv_freq, a = self.frequencies() if scaled else (rope_frequencies(self.dim, self.base), 1.0)
        return score_vs_distance(inv_freq, self.distances(), a)

    def unseen_pairs(self) -> list[int]:
        """Pairs (from 0) that meet angles training never showed: at distance s L the angle s L w'_i exceeds
        L w_i, the largest angle within L, and the pair did not turn a full circle within L (L w_i < 2 pi)."""
        w, (scaled, _) = rope_frequencies(self.dim, self.base), self.frequencies()
        beyond = (self.factor * scaled > w * (1 + 1e-9)) & (self.train_len * w < 2 * math.pi)
        return [int(i) for i in torch.nonzero(beyond).flatten()]

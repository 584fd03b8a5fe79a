"""The RoPE widget: drag the query position m and the key position n, pick a feature pair, watch the
rotated q and k in that pair's plane and the score <rot(q, m), rot(k, n)>, which depends on n - m only."""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..positional import apply_rotary
from .static import StaticFallbackWidget, finite_floats, is_number


def _vector(name, x) -> list[float]:
    xs = finite_floats(name, x)
    if len(xs) < 2 or len(xs) % 2:
        raise ValueError(f"{name} must be a flat list of an even number (>= 2) of finite numbers, "
                         f"got {len(xs)} values")
    return xs


class RotaryWidget(StaticFallbackWidget):
    """One query and one key under rotary position embedding, computed in the browser (``rotary.js``).

    Sliders pick m (query position), n (key position) and the feature pair i; two buttons shift m and
    n together. The page draws pair i of q, k before and after rotation by m theta_i, n theta_i, and
    the full score for every offset n - m. In a kernel ``m``, ``n`` and ``pair`` are synced traits.

    Shape: q, k (D,), D even; positions 0 <= m, n <= max_pos; pair in [0, D/2).
    """

    _esm_file = "rotary.js"
    title = "旋转位置编码：一个查询与一个键"

    q = t.List(t.Float()).tag(sync=True)
    k = t.List(t.Float()).tag(sync=True)
    m = t.Int(0).tag(sync=True)
    n = t.Int(0).tag(sync=True)
    pair = t.Int(0).tag(sync=True)
    max_pos = t.Int(63).tag(sync=True)
    base = t.Float(10000.0).tag(sync=True)

    def __init__(self, q, k, m: int = 3, n: int = 7, pair: int = 0, max_pos: int = 63, base: float = 10000.0):
        q, k = _vector("q", q), _vector("k", k)
        if len(q) != len(k):
            raise ValueError(f"q and k must have the same size, got {len(q)} and {len(k)}")
        if isinstance(max_pos, bool) or not isinstance(max_pos, Integral) or max_pos < 1:
            raise ValueError(f"max_pos must be an integer >= 1, got {max_pos!r}")
        for name, v, hi in (("m", m, max_pos), ("n", n, max_pos), ("pair", pair, len(q) // 2 - 1)):
            if isinstance(v, bool) or not isinstance(v, Integral) or not 0 <= v <= hi:
                raise ValueError(f"{name} must be an integer in [0, {hi}], got {v!r}")
        if not (is_number(base) and math.isfinite(base) and base > 1):
            raise ValueError(f"base must be a finite number > 1, got {base!r}")
        super().__init__(q=q, k=k, m=int(m), n=int(n), pair=int(pair), max_pos=int(max_pos), base=float(base))

    def rotated(self) -> tuple[torch.Tensor, torch.Tensor]:
        """rot(q, m) and rot(k, n) by ``attnbook.apply_rotary`` in float64. Shape: (D,) each."""
        x = torch.tensor([self.q, self.k], dtype=torch.float64)           # (T=2, D): q and k as a sequence
        y = apply_rotary(x, torch.tensor([self.m, self.n]), self.base)    # q at position m, k at position n
        return y[0], y[1]

    def score(self) -> float:
        """<rot(q, m), rot(k, n)>, the attention score before scaling."""
        rq, rk = self.rotated()
        return float(rq @ rk)

    def pair_score(self) -> float:
        """The share of the score from the selected feature pair."""
        rq, rk = self.rotated()
        i = 2 * self.pair
        return float(rq[i:i + 2] @ rk[i:i + 2])

    def offset_scores(self) -> torch.Tensor:
        """Score with q at position 0 and k at position r, for r = -max_pos .. max_pos. Shape: (2 max_pos + 1,)."""
        r = torch.arange(-self.max_pos, self.max_pos + 1)
        q = apply_rotary(torch.tensor([self.q], dtype=torch.float64), torch.tensor([0]), self.base)  # (1, D)
        keys = torch.tensor(self.k, dtype=torch.float64).expand(len(r), -1)                         # (2M+1, D)
        return apply_rotary(keys, r, self.base) @ q[0]

"""The sinusoidal explorer: drag the position and the feature index, watch PE(pos), one feature's wave
and the dot product PE(pos)·PE(n)."""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..positional import sinusoidal_encoding
from .static import StaticFallbackWidget, index_in, is_number


class SinusoidalExplorerWidget(StaticFallbackWidget):
    """Three SVG panels of the sinusoidal encoding, computed in the browser (``positional_explorer.js``).

    The page evaluates sin/cos itself, so the panels respond on the static page with no kernel; in a
    kernel, ``position`` and ``dim`` are synced traits that Python can read and ``observe``.

    Shape: the encoding table is (max_len, d_model); position in [0, max_len), dim in [0, d_model).
    """

    _esm_file = "positional_explorer.js"
    title = "正弦位置编码"

    max_len = t.Int(64).tag(sync=True)
    d_model = t.Int(32).tag(sync=True)
    base = t.Float(10000.0).tag(sync=True)
    position = t.Int(0).tag(sync=True)
    dim = t.Int(0).tag(sync=True)

    def __init__(self, max_len: int = 64, d_model: int = 32, position: int = 10, dim: int = 4,
                 base: float = 10000.0):
        for name, v, lo in (("max_len", max_len, 2), ("d_model", d_model, 1)):
            if isinstance(v, bool) or not isinstance(v, Integral) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        index_in("position", position, max_len)
        index_in("dim", dim, d_model)
        if not (is_number(base) and math.isfinite(base) and base > 1):
            raise ValueError(f"base must be a finite number > 1, got {base!r}")
        super().__init__(max_len=int(max_len), d_model=int(d_model), base=float(base), position=int(position),
                         dim=int(dim))

    def table(self) -> torch.Tensor:
        """The full encoding computed by the package in float64 (the page's numbers must agree)."""
        return sinusoidal_encoding(self.max_len, self.d_model, self.base, dtype=torch.float64)

    def vector(self) -> torch.Tensor:
        """PE(position), shape (d_model,)."""
        return self.table()[self.position]

    def dot_products(self) -> torch.Tensor:
        """PE(position)·PE(n) for n = 0 .. max_len - 1, shape (max_len,)."""
        pe = self.table()
        return pe @ pe[self.position]

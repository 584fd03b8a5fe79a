"""The kernel-regression widget: drag the kernel width w and the query position, watch the
Nadaraya–Watson weights over the stations and the estimate move together."""

from __future__ import annotations

import math

import torch
import traitlets as t

from ..scoring import attend
from .static import StaticFallbackWidget, finite_floats


def gaussian_score(width: float):
    """score(q, k) = -(q - k)^2 / (2 width^2) for 1-d positions.

    Shape: q (..., Tq, 1), k (..., Tk, 1) -> (..., Tq, Tk).
    """
    return lambda q, k: -(q - k.transpose(-2, -1)) ** 2 / (2 * width**2)


class KernelRegressionWidget(StaticFallbackWidget):
    """Nadaraya–Watson regression: a width slider (log scale) and a query slider over 1-d data.

    weights_j = softmax_j(-(q - k_j)^2 / (2 w^2)), estimate = sum_j weights_j v_j. The browser
    computes both (``kernel_regression.js``), plus the estimate along the whole axis; in a kernel
    ``width`` and ``query`` are synced traits.

    Shape: positions (n,) keys, values (n,) values; query in [x_min, x_max], width in [w_min, w_max].
    """

    _esm_file = "kernel_regression.js"
    title = "核回归：核宽与查询位置"

    positions = t.List(t.Float()).tag(sync=True)
    values = t.List(t.Float()).tag(sync=True)
    width = t.Float(10.0).tag(sync=True)
    query = t.Float(0.0).tag(sync=True)
    w_min = t.Float(0.3).tag(sync=True)
    w_max = t.Float(300.0).tag(sync=True)
    x_min = t.Float(0.0).tag(sync=True)
    x_max = t.Float(1.0).tag(sync=True)
    x_unit = t.Unicode("").tag(sync=True)
    y_unit = t.Unicode("").tag(sync=True)

    def __init__(self, positions, values, width=10.0, query=None, x_range=None, w_range=(0.3, 300.0),
                 x_unit="", y_unit=""):
        k, v = finite_floats("positions", positions), finite_floats("values", values)
        if len(k) != len(v):
            raise ValueError(f"{len(k)} positions for {len(v)} values")
        x_min, x_max = (min(k), max(k)) if x_range is None else map(float, x_range)
        query = (x_min + x_max) / 2 if query is None else float(query)
        if not x_min <= query <= x_max or x_min >= x_max:
            raise ValueError(f"need x_min < x_max and x_min <= query <= x_max, got {x_min}, {x_max}, {query}")
        w_min, w_max = map(float, w_range)
        if not 0 < w_min <= width <= w_max < math.inf:
            raise ValueError(f"need 0 < w_min <= width <= w_max, got {w_min}, {width}, {w_max}")
        super().__init__(positions=k, values=v, width=float(width), query=query, w_min=w_min, w_max=w_max,
                         x_min=x_min, x_max=x_max, x_unit=str(x_unit), y_unit=str(y_unit))

    def estimates(self, queries) -> tuple[torch.Tensor, torch.Tensor]:
        """Estimates and weights at several query positions, computed by ``attnbook.attend`` in float64.

        Shape: queries (m,) -> estimates (m,), weights (m, n).
        """
        q = torch.as_tensor(queries, dtype=torch.float64).view(1, -1, 1)   # (B=1, Tq=m, 1)
        k = torch.tensor(self.positions, dtype=torch.float64).view(1, -1, 1)  # (1, Tk=n, 1)
        v = torch.tensor(self.values, dtype=torch.float64).view(1, -1, 1)     # (1, n, 1)
        out, w = attend(q, k, v, gaussian_score(self.width))
        return out[0, :, 0], w[0]

    def weights(self) -> torch.Tensor:
        """Weights over the n data points at the current query and width. Shape: (n,)."""
        return self.estimates([self.query])[1][0]

    def estimate(self) -> float:
        """The weighted average of the values at the current query and width."""
        return float(self.estimates([self.query])[0][0])

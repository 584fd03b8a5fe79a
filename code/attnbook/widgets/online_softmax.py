"""The online-softmax widget: step through the key blocks of one query row and watch the running max m,
the normaliser l and the unnormalised output being rescaled, until they equal the full softmax."""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..efficient import online_softmax_stats, tiled_attention
from .static import StaticFallbackWidget, finite_floats


class OnlineSoftmaxWidget(StaticFallbackWidget):
    """One query row: scores s_j and scalar values v_j, read one block of keys per step (``online_softmax.js``).

    After block t: m_t = max(m_{t-1}, max_block s), l_t = l_{t-1} e^{m_{t-1} - m_t} + sum_block e^{s - m_t},
    o~_t = o~_{t-1} e^{m_{t-1} - m_t} + sum_block e^{s - m_t} v, and o_t = o~_t / l_t. ``step`` and
    ``block_size`` are synced traits; step 0 means no key read yet.

    Shape: scores (n,), values (n,); step in [0, ceil(n / block_size)].
    """

    _esm_file = "online_softmax.js"
    title = "在线 Softmax：逐块读分数"

    scores = t.List(t.Float()).tag(sync=True)
    values = t.List(t.Float()).tag(sync=True)
    block_size = t.Int(4).tag(sync=True)
    step = t.Int(0).tag(sync=True)

    def __init__(self, scores, values, block_size: int = 4, step: int = 0):
        s, v = finite_floats("scores", scores), finite_floats("values", values)
        if len(s) != len(v):
            raise ValueError(f"{len(s)} scores for {len(v)} values")
        if isinstance(block_size, bool) or not isinstance(block_size, Integral) or not 1 <= block_size <= len(s):
            raise ValueError(f"block_size must be an integer in [1, {len(s)}], got {block_size!r}")
        n_blocks = -(-len(s) // block_size)
        if isinstance(step, bool) or not isinstance(step, Integral) or not 0 <= step <= n_blocks:
            raise ValueError(f"step must be an integer in [0, {n_blocks}], got {step!r}")
        super().__init__(scores=s, values=v, block_size=int(block_size), step=int(step))

    def n_blocks(self) -> int:
        return -(-len(self.scores) // self.block_size)

    def seen(self) -> int:
        """How many keys the current step has read."""
        return min(self.step * self.block_size, len(self.scores))

    def running(self) -> dict[str, float]:
        """m, l, o~ and o after ``step`` blocks, from the package's online softmax and tiled attention.

        Step 0: m = -inf, l = 0, o~ = 0 and o undefined (nan).
        """
        n = self.seen()
        if n == 0:
            return dict(m=-math.inf, l=0.0, o_tilde=0.0, o=math.nan)
        s = torch.tensor(self.scores[:n], dtype=torch.float64)
        m, l = online_softmax_stats(s, self.block_size)                     # (1,), (1,)
        # attention with D = 1, q = 1, k_j = s_j and scale 1: the scores are s_j themselves
        k = s.view(n, 1)                                                     # (Tk=n, D=1)
        v = torch.tensor(self.values[:n], dtype=torch.float64).view(n, 1)   # (n, Dv=1)
        o = float(tiled_attention(torch.ones(1, 1, dtype=torch.float64), k, v, self.block_size, scale=1.0)[0, 0])
        return dict(m=float(m), l=float(l), o_tilde=o * float(l), o=o)

    def weights(self) -> torch.Tensor:
        """e^{s_j - m} / l over the keys read so far, 0 for the rest. Shape: (n,)."""
        r, n = self.running(), self.seen()
        w = torch.zeros(len(self.scores), dtype=torch.float64)
        if n:
            w[:n] = torch.exp(torch.tensor(self.scores[:n], dtype=torch.float64) - r["m"]) / r["l"]
        return w

"""The d_k widget: drag d_k and compare softmax(q·k) with softmax(q·k / sqrt(d_k))."""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..softmax import entropy, softmax
from .static import StaticFallbackWidget


def dk_grid(d_max: int = 1024, per_octave: int = 4) -> list[int]:
    """Distinct integers 1 ... d_max spaced evenly on a log scale (``per_octave`` per doubling)."""
    steps = round(math.log2(d_max) * per_octave)
    return sorted({max(1, round(2 ** (i / per_octave))) for i in range(steps + 1)} | {d_max})


def raw_scores(dks: list[int], n_keys: int = 6, seed: int = 0) -> torch.Tensor:
    """Dot products of one query with ``n_keys`` keys, entries i.i.d. N(0, 1), for each d_k.

    The vectors are drawn once at the largest d_k; d_k uses their first d_k coordinates, so
    the scores change continuously along the grid and their variance grows like d_k.

    Shape: -> (len(dks), n_keys) float64.
    """
    g = torch.Generator().manual_seed(seed)
    d_max = max(dks)
    q = torch.randn(d_max, generator=g, dtype=torch.float64)          # (d_max,)
    keys = torch.randn(n_keys, d_max, generator=g, dtype=torch.float64)  # (n, d_max)
    return torch.stack([keys[:, :d] @ q[:d] for d in dks])            # (len(dks), n)


class DkScalingWidget(StaticFallbackWidget):
    """Attention weights of one query over a few keys, with and without the 1/sqrt(d_k) scale.

    Python draws the random vectors and ships the raw scores q·k_j for every d_k on a log
    grid; the browser (``dk_scaling.js``) computes both softmaxes and their entropies, so the
    slider works on the static page. In a kernel ``d_k`` is a synced trait.

    Shape: scores (len(dks), n_keys); labels n_keys strings.
    """

    _esm_file = "dk_scaling.js"
    title = "点积分数随 d_k 变宽与缩放"

    dks = t.List(t.Int()).tag(sync=True)
    scores = t.List(t.List(t.Float())).tag(sync=True)
    labels = t.List(t.Unicode()).tag(sync=True)
    d_k = t.Int(64).tag(sync=True)

    def __init__(self, n_keys: int = 6, d_k: int = 64, d_max: int = 1024, seed: int = 0):
        for name, val, low in (("n_keys", n_keys, 2), ("d_max", d_max, 2)):
            if isinstance(val, bool) or not isinstance(val, Integral) or val < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {val!r}")
        dks = dk_grid(int(d_max))
        if d_k not in dks:
            raise ValueError(f"d_k={d_k!r} is not on the grid {dks}")
        s = raw_scores(dks, int(n_keys), seed)
        super().__init__(dks=dks, scores=s.tolist(), labels=[f"k{j + 1}" for j in range(n_keys)],
                         d_k=int(d_k))

    @t.validate("d_k")
    def _d_k_on_grid(self, proposal):
        if self.dks and proposal["value"] not in self.dks:
            raise t.TraitError(f"d_k={proposal['value']} is not on the grid {self.dks}")
        return proposal["value"]

    def current_scores(self) -> torch.Tensor:
        """Raw scores q·k_j at the current d_k. Shape: (n_keys,) float64."""
        return torch.tensor(self.scores[self.dks.index(self.d_k)], dtype=torch.float64)

    def weights(self, scaled: bool = True) -> torch.Tensor:
        """softmax(s / sqrt(d_k)) if ``scaled`` else softmax(s): what the JS must draw. Shape: (n_keys,)."""
        s = self.current_scores()
        return softmax(s / math.sqrt(self.d_k) if scaled else s)

    def entropy(self, scaled: bool = True) -> float:
        """Entropy in nats of :meth:`weights`; between 0 and log n_keys."""
        return float(entropy(self.weights(scaled)))

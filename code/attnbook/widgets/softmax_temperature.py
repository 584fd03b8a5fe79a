"""The temperature widget: drag T and watch softmax(z / T) sharpen or flatten."""

from __future__ import annotations

import torch
import traitlets as t

from ..softmax import entropy, softmax
from .static import StaticFallbackWidget, finite_floats, is_number


class SoftmaxTemperatureWidget(StaticFallbackWidget):
    """Bar chart of softmax(z / T) with a log-scale slider over T.

    The browser computes softmax(z / T) itself (``softmax_temperature.js``), so the chart responds
    on the static page with no kernel; in a kernel, ``temperature`` is a synced trait that Python
    can read and ``observe``.

    Shape: logits (n,), labels n strings.
    """

    _esm_file = "softmax_temperature.js"
    title = "Softmax 的温度"

    logits = t.List(t.Float()).tag(sync=True)
    labels = t.List(t.Unicode()).tag(sync=True)
    temperature = t.Float(1.0).tag(sync=True)
    t_min = t.Float(0.05).tag(sync=True)
    t_max = t.Float(20.0).tag(sync=True)

    def __init__(self, logits, labels=None, temperature=1.0, t_min=0.05, t_max=20.0):
        z = finite_floats("logits", logits)
        labels = list(labels) if labels is not None else [f"z{i + 1}" for i in range(len(z))]
        if len(labels) != len(z):
            raise ValueError(f"{len(labels)} labels for {len(z)} logits")
        if not (all(map(is_number, (t_min, temperature, t_max))) and 0 < t_min <= temperature <= t_max):
            raise ValueError(f"need 0 < t_min <= temperature <= t_max, got {t_min!r}, {temperature!r}, {t_max!r}")
        super().__init__(logits=z, labels=[str(s) for s in labels], temperature=float(temperature),
                         t_min=float(t_min), t_max=float(t_max))

    def probabilities(self) -> torch.Tensor:
        """softmax(z / T) for the current T, computed by the package (the JS must agree)."""
        return softmax(torch.tensor(self.logits, dtype=torch.float64), temperature=self.temperature)

    def entropy(self) -> float:
        """Entropy in nats of the current distribution; between 0 and log n."""
        return float(entropy(self.probabilities()))

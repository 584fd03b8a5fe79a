"""The sampling widget: a language model's next-token candidates under temperature, top-k and top-p."""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..sampling import sampling_probs
from .static import StaticFallbackWidget, index_in, is_number


def kept_probs(z: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """sampling_rules.js's keptProbs: :func:`attnbook.sampling_probs` with the widgets' off values (top_k 0, top_p 1)."""
    return sampling_probs(z, temperature, top_k or None, None if top_p >= 1 else top_p)


def pick_at(q: torch.Tensor, u: float) -> int:
    """sampling_rules.js's pickAt: the first index whose cumulative probability exceeds u (inverse CDF)."""
    cdf = q.cumsum(0)
    return int((cdf <= u).sum().clamp(max=len(cdf) - 1))


class SamplingWidget(StaticFallbackWidget):
    """Bars of the N most probable next tokens after each prompt, filtered and renormalised as
    :func:`attnbook.sampling_probs` does (temperature -> top-k -> top-p), with the token a fixed
    uniform draw ``u`` picks (inverse CDF: the first token whose cumulative probability exceeds u).

    Only the N stored candidates take part: the distribution shown is the model's restricted to them.
    The browser redoes the arithmetic (``sampling_explorer.js``), so the sliders work on the static page;
    in a kernel ``prompt_index``, ``temperature``, ``top_k`` and ``top_p`` are synced traits.

    Shape: logits (P, N), tokens P lists of N strings, prompts P strings, uniforms (P,).
    """

    _esm_file = "sampling_explorer.js"
    _esm_deps = ("sampling_rules.js",)
    title = "采样：温度、top-k 与 top-p"

    prompts = t.List(t.Unicode()).tag(sync=True)
    tokens = t.List(t.List(t.Unicode())).tag(sync=True)
    logits = t.List(t.List(t.Float())).tag(sync=True)
    uniforms = t.List(t.Float()).tag(sync=True)
    prompt_index = t.Int(0).tag(sync=True)
    temperature = t.Float(1.0).tag(sync=True)
    top_k = t.Int(0).tag(sync=True)           # 0: off
    top_p = t.Float(1.0).tag(sync=True)       # 1: off

    def __init__(self, prompts, tokens, logits, uniforms, temperature=1.0, top_k=0, top_p=1.0):
        z = logits.tolist() if hasattr(logits, "tolist") else [list(map(float, row)) for row in logits]
        n_prompts = len(prompts)
        if n_prompts == 0 or len(z) != n_prompts or len(tokens) != n_prompts or len(uniforms) != n_prompts:
            raise ValueError(f"need one row of logits, tokens and one uniform per prompt: {n_prompts} prompts, "
                             f"{len(z)} logit rows, {len(tokens)} token rows, {len(uniforms)} uniforms")
        widths = {len(row) for row in z} | {len(row) for row in tokens}
        if len(widths) != 1 or 0 in widths:
            raise ValueError(f"every prompt needs the same number N >= 1 of logits and tokens, "
                             f"got sizes {sorted(widths)}")
        if not all(math.isfinite(v) for row in z for v in row):
            raise ValueError("logits must be finite")
        if not all(0 <= u < 1 for u in uniforms):
            raise ValueError(f"uniforms must lie in [0, 1), got {list(uniforms)}")
        super().__init__(prompts=list(map(str, prompts)), tokens=[list(map(str, r)) for r in tokens],
                         logits=[[float(v) for v in row] for row in z], uniforms=[float(u) for u in uniforms])
        self.set_controls(temperature, top_k, top_p)

    def set_controls(self, temperature: float, top_k: int, top_p: float, prompt_index: int | None = None) -> None:
        """Set the controls (checked as the sampling functions check them; top_k 0 and top_p 1 mean off)."""
        n = len(self.logits[0])
        if not (is_number(temperature) and 0 < temperature < math.inf and is_number(top_k)
                and isinstance(top_k, Integral) and 0 <= top_k <= n and is_number(top_p) and 0 < top_p <= 1):
            raise ValueError(f"need temperature > 0, an integer 0 <= top_k <= {n} and 0 < top_p <= 1, "
                             f"got {temperature!r}, {top_k!r}, {top_p!r}")
        if prompt_index is not None:
            index_in("prompt_index", prompt_index, len(self.prompts))
        with self.hold_trait_notifications():
            self.temperature, self.top_k, self.top_p = float(temperature), int(top_k), float(top_p)
            if prompt_index is not None:
                self.prompt_index = int(prompt_index)

    def probabilities(self) -> torch.Tensor:
        """The renormalised probabilities of the N candidates of the current prompt (0 = dropped). Shape: (N,)."""
        z = torch.tensor(self.logits[self.prompt_index], dtype=torch.float64)
        return kept_probs(z, self.temperature, self.top_k, self.top_p)

    def drawn(self) -> str:
        """The token the fixed uniform draw u picks: the first whose cumulative probability exceeds u."""
        return self.tokens[self.prompt_index][pick_at(self.probabilities(), self.uniforms[self.prompt_index])]

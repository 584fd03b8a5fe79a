"""Talk to the chapter's GPT on the page: the browser runs the trained model itself (``gpt_chat.js``).

The weights travel as :mod:`attnbook.gpt_export`'s payload: in a kernel in the ``weights`` trait, on the static
page in a separate ``.js`` file beside the page (``weights_file``, loaded by a ``<script src>``; the book's
offline_book extension writes it from the executed notebook's widget state). The page's inline block carries only
the prompt, the controls and the continuation Python computed (``initial``), which is what shows where the weights
cannot load (the PDF).

Generation follows :meth:`attnbook.DecoderOnlyLM.generate` with ``max_context``: the model reads the last
``max_context`` characters, through a KV cache until the text is longer than that, then re-reading the window.
Greedy picks the most probable character; otherwise the draw u of a seeded mulberry32 picks from the
probabilities :func:`attnbook.sampling_probs` keeps (temperature -> top-k -> top-p; inverse CDF, as the sampling
widget does). Characters outside the vocabulary are read as ``<unk>``, as ``CharVocab.encode`` does.
"""

from __future__ import annotations

import math
from numbers import Integral

import torch
import traitlets as t

from ..gpt_export import export_weights, load_weights
from .sampling_explorer import kept_probs, pick_at
from .static import StaticFallbackWidget, is_number

_M32 = 0xFFFFFFFF
UNK = "<unk>"


def mulberry32(seed: int):
    """The widget's seeded uniform draws in [0, 1), bit for bit those of ``mulberry32`` in gpt_chat.js."""
    a = seed & _M32
    while True:
        a = (a + 0x6D2B79F5) & _M32
        x = ((a ^ (a >> 15)) * (1 | a)) & _M32
        x = ((x + (((x ^ (x >> 7)) * (61 | x)) & _M32)) & _M32) ^ x
        yield ((x ^ (x >> 14)) & _M32) / 2 ** 32


class GptChatWidget(StaticFallbackWidget):
    """A prompt box, sampling controls and the continuation a trained :class:`attnbook.DecoderOnlyLM` writes
    in the browser, character by character; hovering a written character shows every layer's and head's
    attention (the row of the position that wrote it) over the characters the model read.

    ``itos`` lists the model's characters by id (``vocab.itos``); it must hold ``"<unk>"``.
    """

    _esm_file = "gpt_chat.js"
    _esm_deps = ("sampling_rules.js",)
    title = "和本章的 GPT 对话"

    weights = t.Dict().tag(sync=True)               # gpt_export payload; left out of the static page
    weights_file = t.Unicode().tag(sync=True)       # the page's weights script, beside the page
    prompt = t.Unicode().tag(sync=True)
    initial = t.List(t.Unicode()).tag(sync=True)    # Python's continuation (tokens) under the initial controls
    max_context = t.Int(64).tag(sync=True)
    max_new = t.Int(30).tag(sync=True)
    greedy = t.Bool(True).tag(sync=True)
    temperature = t.Float(1.0).tag(sync=True)
    top_k = t.Int(0).tag(sync=True)                 # 0: off
    top_p = t.Float(1.0).tag(sync=True)             # 1: off
    seed = t.Int(0).tag(sync=True)

    def __init__(self, model, itos, prompt: str, *, max_context: int = 64, max_new: int = 30,
                 weights_file: str = "gpt-live-weights.js", **controls):
        weights = export_weights(model, itos)
        if UNK not in weights["itos"]:
            raise ValueError(f"itos must hold {UNK!r} (read for characters outside the vocabulary)")
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
        for name, n in (("max_context", max_context), ("max_new", max_new)):
            if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        super().__init__(weights=weights, weights_file=weights_file, prompt=prompt, max_context=int(max_context),
                         max_new=int(max_new))
        self._model = load_weights(weights)          # the model the browser runs (float16 weights)
        self._stoi = {c: i for i, c in enumerate(weights["itos"])}
        self.set_controls(**controls)

    def set_controls(self, greedy: bool = True, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                     seed: int = 0) -> None:
        """Set the sampling controls (top_k 0 and top_p 1 mean off) and recompute ``initial``."""
        v = self.weights["config"]["vocab_size"]
        if not (isinstance(greedy, bool) and is_number(temperature) and 0 < temperature < math.inf
                and isinstance(top_k, Integral) and not isinstance(top_k, bool) and 0 <= top_k <= v
                and is_number(top_p) and 0 < top_p <= 1 and isinstance(seed, Integral) and 0 <= seed < 2 ** 32):
            raise ValueError(f"need greedy True/False, temperature > 0, an integer 0 <= top_k <= {v}, "
                             f"0 < top_p <= 1 and an integer seed in [0, 2^32), got {greedy!r}, {temperature!r}, "
                             f"{top_k!r}, {top_p!r}, {seed!r}")
        with self.hold_trait_notifications():
            self.greedy, self.temperature, self.top_k = greedy, float(temperature), int(top_k)
            self.top_p, self.seed = float(top_p), int(seed)
            self.initial = self.continuation(self.prompt)

    def _static_state(self) -> dict:
        state = super()._static_state()
        del state["weights"]                         # the page loads them from weights_file
        return state

    def static_html(self) -> str:
        return f'<script src="{self.weights_file}"></script>\n' + super().static_html()

    def unseen(self, text: str) -> list[str]:
        """The characters of ``text`` outside the vocabulary, each once, in order."""
        return list(dict.fromkeys(c for c in text if c not in self._stoi))

    def encode(self, text: str) -> list[int]:
        return [self._stoi.get(c, self._stoi[UNK]) for c in text]

    def generate(self, prompt: str, max_new: int | None = None) -> str:
        """The continuation the widget writes after ``prompt`` under its controls, as one string."""
        return "".join(self.continuation(prompt, max_new))

    @torch.no_grad()
    def continuation(self, prompt: str, max_new: int | None = None) -> list[str]:
        """The characters the widget writes after ``prompt`` under its controls (torch, float16 weights)."""
        ids, draws = self.encode(prompt), mulberry32(self.seed)
        for _ in range(self.max_new if max_new is None else max_new):
            z = self._model(torch.tensor([ids[-self.max_context:]]), last_only=True)[0, -1].double()   # (V,)
            if self.greedy:
                ids.append(int(z.argmax()))
                continue
            ids.append(pick_at(kept_probs(z, self.temperature, self.top_k, self.top_p), next(draws)))
        return [self.weights["itos"][i] for i in ids[len(prompt):]]

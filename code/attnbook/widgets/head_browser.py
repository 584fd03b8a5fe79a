"""Browse the attention maps of a real pretrained model (MiniLM-L6: 6 layers x 12 heads), layer by head."""

from __future__ import annotations

from numbers import Integral
from typing import Any

import torch
import traitlets as t

from .static import StaticFallbackWidget

SCALE = 1000  # weights are shipped as integer thousandths: 3 decimals, a small page

# Guided questions: (pattern, question, threshold). A head answers one when its pattern score,
# averaged over the sentences, reaches the threshold; the page and check_answer() test the same.
QUESTIONS = [
    ("previous", "找一个几乎只看前一个 token 的头（查询 i 给键 i − 1 的平均权重 ≥ 0.9）", 0.9),
    ("next", "找一个主要看后一个 token 的头（查询 i 给键 i + 1 的平均权重 ≥ 0.5）", 0.5),
    ("cls", "找一个把绝大部分权重停在 [CLS] 上的头（所有查询给第一个 token 的平均权重 ≥ 0.8）", 0.8),
]


def pattern_score(w: torch.Tensor, pattern: str) -> torch.Tensor:
    """How much a map follows a pattern: the mean weight of query i on key i - 1 ("previous"), on key i + 1
    ("next"), or on key 0 ("cls").

    Shape: w (..., T, T), queries ↓ keys → -> (...)
    """
    if pattern == "previous":
        return w.diagonal(-1, -2, -1).mean(-1)     # w[i, i - 1], i = 1 .. T-1
    if pattern == "next":
        return w.diagonal(1, -2, -1).mean(-1)      # w[i, i + 1], i = 0 .. T-2
    if pattern == "cls":
        return w[..., 0].mean(-1)
    raise ValueError(f"pattern must be 'previous', 'next' or 'cls', got {pattern!r}")


def attention_maps(sentences: list[str], model: Any = None, tokenizer: Any = None
                   ) -> tuple[list[list[str]], list[torch.Tensor]]:
    """Every head's attention weights for each sentence, padding cut off.

    ``model``/``tokenizer`` default to :func:`attnbook.pretrained.load_minilm` (eager attention).

    Shape:
        -> tokens: one list of T_b WordPiece strings per sentence;
           weights: one (L, H, T_b, T_b) float32 tensor per sentence, queries ↓ keys →.
    """
    from ..pretrained import encode, load_minilm

    if model is None or tokenizer is None:
        model, tokenizer = load_minilm()
    enc = encode(model, tokenizer, list(sentences), attentions=True)
    stacked = torch.stack(enc.attentions, dim=1).float().cpu()  # L x (B, H, T, T) -> (B, L, H, T, T)
    out = []
    for b, toks in enumerate(enc.tokens):
        n = len(toks)  # right padding: the real tokens come first
        out.append(stacked[b, :, :, :n, :n].contiguous())  # (L, H, T_b, T_b)
    return enc.tokens, out


class AttentionHeadBrowser(StaticFallbackWidget):
    """Heatmap of one head's attention weights, an overview of every layer x head, and guided questions.

    Python runs the model once and ships every map, rounded to 3 decimals (integer thousandths);
    the browser picks the map and draws it (``head_browser.js``), so it works on the static page.
    A select switches the sentence; sliders, or a click on the overview grid, switch layer and head.
    Each question's button scores the open head by :func:`pattern_score` (mean over the sentences)
    against the question's threshold. ``sentence``, ``layer`` and ``head`` (0-based) are synced traits.

    Shape: weights[sentence][layer][head] is a (T, T) nested list of ints, value = weight * 1000.
    """

    _esm_file = "head_browser.js"

    sentences = t.List(t.Unicode()).tag(sync=True)
    tokens = t.List(t.List(t.Unicode())).tag(sync=True)
    weights = t.List(t.List(t.List(t.List(t.List(t.Int()))))).tag(sync=True)
    num_layers = t.Int().tag(sync=True)
    num_heads = t.Int().tag(sync=True)
    sentence = t.Int(0).tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    head = t.Int(0).tag(sync=True)
    questions = t.List(t.Tuple(t.Unicode(), t.Unicode(), t.Float())).tag(sync=True)

    def __init__(self, sentences: list[str], model: Any = None, tokenizer: Any = None,
                 layer: int = 0, head: int = 0, maps: tuple[list[list[str]], list[torch.Tensor]] | None = None):
        if isinstance(sentences, str) or not sentences or not all(isinstance(s, str) and s for s in sentences):
            raise ValueError(f"sentences must be a non-empty list of non-empty strings, got {sentences!r}")
        tokens, maps = maps if maps is not None else attention_maps(sentences, model, tokenizer)
        if len(tokens) != len(sentences) or len(maps) != len(sentences):
            raise ValueError(f"{len(sentences)} sentences but {len(tokens)} token lists and {len(maps)} maps")
        n_layers, n_heads = maps[0].shape[:2]
        for i, (toks, w) in enumerate(zip(tokens, maps)):
            if w.shape != (n_layers, n_heads, len(toks), len(toks)):
                raise ValueError(f"maps[{i}] of shape {tuple(w.shape)} must be ({n_layers}, {n_heads}, "
                                 f"{len(toks)}, {len(toks)}) for its {len(toks)} tokens")
        for name, val, n in (("layer", layer, n_layers), ("head", head, n_heads)):
            if isinstance(val, bool) or not isinstance(val, Integral) or not 0 <= val < n:
                raise ValueError(f"{name} must be an integer in [0, {n}), got {val!r}")
        milli = [torch.round(w * SCALE).to(torch.int64).tolist() for w in maps]  # 3 decimals
        super().__init__(sentences=list(sentences), tokens=[list(x) for x in tokens], weights=milli,
                         num_layers=int(n_layers), num_heads=int(n_heads), sentence=0,
                         layer=int(layer), head=int(head), questions=[list(q) for q in QUESTIONS])

    def current(self) -> torch.Tensor:
        """The map on display, as drawn (rounded to 3 decimals). Shape: (T, T) float64, queries ↓ keys →."""
        w = self.weights[self.sentence][self.layer][self.head]
        return torch.tensor(w, dtype=torch.float64) / SCALE

    def pattern_scores(self, pattern: str) -> torch.Tensor:
        """:func:`pattern_score` of every head on the shipped maps, averaged over the sentences. Shape: (L, H)."""
        per_sentence = [pattern_score(torch.tensor(w, dtype=torch.float64) / SCALE, pattern)  # (L, H) each
                        for w in self.weights]
        return torch.stack(per_sentence).mean(0)

    def check_answer(self, question: int) -> tuple[float, bool]:
        """(score, passed) of the open layer and head for question ``question`` (0-based)."""
        if isinstance(question, bool) or not isinstance(question, Integral) or not 0 <= question < len(self.questions):
            raise ValueError(f"question must be an integer in [0, {len(self.questions)}), got {question!r}")
        pattern, _, threshold = self.questions[question]
        score = float(self.pattern_scores(pattern)[self.layer, self.head])
        return score, score >= threshold

"""Browse the attention maps of a real pretrained model (MiniLM-L6: 6 layers x 12 heads), layer by head."""

from __future__ import annotations

import base64
from typing import Any

import torch
import traitlets as t

from .static import StaticFallbackWidget, index_in

SCALE = 255  # weights ship as one byte each, round(w * 255), base64: 1.33 characters per weight

# Guided questions: (pattern, question, threshold). A head answers one when its pattern score,
# averaged over the sentences, reaches the threshold; the page and check_answer() test the same.
QUESTIONS = [
    ("previous", "找一个几乎只看前一个词元的头（查询 i 给键 i − 1 的平均权重 ≥ 0.9）", 0.9),
    ("next", "找一个主要看后一个词元的头（查询 i 给键 i + 1 的平均权重 ≥ 0.5）", 0.5),
    ("cls", "找一个把绝大部分权重停在 [CLS] 上的头（所有查询给第一个词元的平均权重 ≥ 0.8）", 0.8),
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


def pack_maps(maps: list[torch.Tensor]) -> str:
    """Base64 of every weight as one byte round(w * SCALE), sentence by sentence in (L, H, T, T) order."""
    return base64.b64encode(b"".join(bytes(torch.round(w.double() * SCALE).to(torch.uint8).flatten().tolist())
                                     for w in maps)).decode("ascii")


def unpack_maps(packed: str, lengths: list[int], num_layers: int, num_heads: int) -> list[torch.Tensor]:
    """The inverse of :func:`pack_maps` (divided by SCALE). Shape: -> one (L, H, T_b, T_b) float64 per sentence."""
    raw = torch.tensor(list(base64.b64decode(packed)), dtype=torch.float64) / SCALE
    sizes = [num_layers * num_heads * n * n for n in lengths]
    if len(raw) != sum(sizes):
        raise ValueError(f"{len(raw)} packed weights for sentences of {lengths} tokens, expected {sum(sizes)}")
    return [w.view(num_layers, num_heads, n, n) for w, n in zip(raw.split(sizes), lengths)]


class AttentionHeadBrowser(StaticFallbackWidget):
    """Heatmap of one head's attention weights, an overview of every layer x head, and guided questions.

    Python runs the model once and ships every map, rounded to 3 decimals (integer thousandths);
    the browser picks the map and draws it (``head_browser.js``), so it works on the static page.
    A select switches the sentence; sliders, or a click on the overview grid, switch layer and head.
    Each question's button scores the open head by :func:`pattern_score` (mean over the sentences)
    against the question's threshold. ``sentence``, ``layer`` and ``head`` (0-based) are synced traits.

    Shape: ``weights`` packs one (L, H, T_b, T_b) map per sentence (:func:`pack_maps`).
    """

    _esm_file = "head_browser.js"
    title = "注意力头查看器"

    sentences = t.List(t.Unicode()).tag(sync=True)
    tokens = t.List(t.List(t.Unicode())).tag(sync=True)
    weights = t.Unicode().tag(sync=True)
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
            if not bool(((w >= 0) & (w <= 1)).all()):
                raise ValueError(f"maps[{i}] must hold attention weights in [0, 1] (no NaN)")
        layer, head = index_in("layer", layer, n_layers), index_in("head", head, n_heads)
        super().__init__(sentences=list(sentences), tokens=[list(x) for x in tokens], weights=pack_maps(maps),
                         num_layers=int(n_layers), num_heads=int(n_heads), sentence=0,
                         layer=layer, head=head, questions=[list(q) for q in QUESTIONS])

    def maps(self) -> list[torch.Tensor]:
        """The shipped maps, as drawn (to 1/255). Shape: one (L, H, T_b, T_b) float64 tensor per sentence."""
        return unpack_maps(self.weights, [len(x) for x in self.tokens], self.num_layers, self.num_heads)

    def current(self) -> torch.Tensor:
        """The map on display. Shape: (T, T) float64, queries ↓ keys →."""
        return self.maps()[self.sentence][self.layer, self.head]

    def pattern_scores(self, pattern: str) -> torch.Tensor:
        """:func:`pattern_score` of every head on the shipped maps, averaged over the sentences. Shape: (L, H)."""
        per_sentence = [pattern_score(w, pattern) for w in self.maps()]                     # (L, H) each
        return torch.stack(per_sentence).mean(0)

    def check_answer(self, question: int) -> tuple[float, bool]:
        """(score, passed) of the open layer and head for question ``question`` (0-based)."""
        pattern, _, threshold = self.questions[index_in("question", question, len(self.questions))]
        score = float(self.pattern_scores(pattern)[self.layer, self.head])
        return score, score >= threshold

"""Cross-attention of a trained encoder–decoder: pick an input, a layer and a head, and step through the
output characters to see which source characters each one reads."""

from __future__ import annotations

from numbers import Integral

import torch
import traitlets as t

from ..decoding import _eval_no_grad, greedy_decode, shift_right
from .static import StaticFallbackWidget, index_in

SCALE = 1_000_000  # weights ship as integer millionths: within 5e-7 of the model's, and a light page


@_eval_no_grad
def cross_attention_maps(model, sources: list[str], src_vocab, tgt_vocab, max_len: int
                         ) -> tuple[list[list[str]], list[torch.Tensor]]:
    """The model's greedy output for each source, and every layer's and head's cross-attention while writing it.

    Row t is the decoder position that writes output token t (it reads <bos> y_1 … y_{t-1}); rows run up to
    and including <eos> (``max_len`` rows if the model never writes one).

    Shape:
        -> targets: one list of T_b output tokens per source (characters, then "<eos>");
           maps: one (L, H, T_b, S_b) float32 tensor per source, queries ↓ keys →, padding cut off.
    """
    if isinstance(sources, str) or not sources or not all(isinstance(s, str) and s for s in sources):
        raise ValueError(f"sources must be a non-empty list of non-empty strings, got {sources!r}")
    device = next(model.parameters()).device
    src = src_vocab.encode_batch(list(sources)).to(device)                       # (B, S), right-padded
    tokens, _ = greedy_decode(model, src, max_len, tgt_vocab.BOS, tgt_vocab.EOS, tgt_vocab.PAD)  # (B, T)
    cross = model.attention_maps(src, shift_right(tokens, tgt_vocab.BOS))["cross"]    # L tensors (B, H, T, S)
    cross = torch.stack(cross, 1).float().cpu()                                  # (B, L, H, T, S)
    targets, maps = [], []
    for b, source in enumerate(sources):
        n = int((tokens[b] != tgt_vocab.PAD).sum())          # tokens up to and including <eos>
        targets.append([tgt_vocab.itos[i] for i in tokens[b, :n].tolist()])
        maps.append(cross[b, :, :, :n, :len(source)].contiguous())   # (L, H, T_b, S_b)
    return targets, maps


def peak_in_span_share(maps: list[torch.Tensor], rows: list[int], spans: list[tuple[int, int]]) -> torch.Tensor:
    """For every layer and head, the share of (input, row) pairs whose largest weight falls on a key inside
    that input's span [start, end). Ties go to the first key (as ``torch.argmax`` and the page do); a row
    past an input's last output token is left out.

    Shape: maps: N tensors (L, H, T_b, S_b); rows: target positions; spans: N pairs -> (L, H) float64.
    """
    if len(spans) != len(maps):
        raise ValueError(f"{len(spans)} spans for {len(maps)} maps")
    hits, total = 0, 0
    for w, (start, end) in zip(maps, spans):
        for r in rows:
            if r < w.size(2):
                peak = w[:, :, r].argmax(-1)                      # (L, H): the key each head looks at most
                hits = hits + ((peak >= start) & (peak < end)).double()
                total += 1
    if total == 0:
        raise ValueError(f"no input has an output row among {list(rows)}")
    return hits / total


class CrossAttentionWidget(StaticFallbackWidget):
    """One input's cross-attention map for a chosen layer and head (queries ↓ output tokens, keys → source
    tokens), a step slider over the output tokens that highlights one row and shades the source characters by
    its weights, and an optional question the reader answers by choosing a head.

    Python ships every map as integer millionths; ``cross_attention.js`` draws them and scores the question, so
    it works on the static page. ``example``, ``layer``, ``head`` and ``step`` (0-based) are synced traits.
    The question (text, rows, spans, threshold) asks for a head whose largest weight, on the output rows
    ``rows``, falls inside each input's source span: :func:`peak_in_span_share` >= threshold.

    Shape: weights[example][layer][head] is a (T, S) nested list of ints, value = weight * SCALE.
    """

    _esm_file = "cross_attention.js"
    title = "交叉注意力：逐层、逐头、逐个输出字符"

    source_tokens = t.List(t.List(t.Unicode())).tag(sync=True)
    target_tokens = t.List(t.List(t.Unicode())).tag(sync=True)
    weights = t.List(t.List(t.List(t.List(t.List(t.Int()))))).tag(sync=True)
    num_layers = t.Int().tag(sync=True)
    num_heads = t.Int().tag(sync=True)
    example = t.Int(0).tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    head = t.Int(0).tag(sync=True)
    step = t.Int(0).tag(sync=True)
    question = t.Unicode("").tag(sync=True)
    question_rows = t.List(t.Int()).tag(sync=True)
    question_spans = t.List(t.List(t.Int())).tag(sync=True)
    question_threshold = t.Float(1.0).tag(sync=True)

    def __init__(self, source_tokens: list[list[str]], target_tokens: list[list[str]], maps: list[torch.Tensor], *,
                 example: int = 0, layer: int = 0, head: int = 0, step: int = 0, question: tuple | None = None):
        n = len(maps)
        if n == 0 or len(source_tokens) != n or len(target_tokens) != n:
            raise ValueError(f"need one source and one target token list per map, got {len(source_tokens)} "
                             f"sources, {len(target_tokens)} targets and {n} maps")
        n_layers, n_heads = maps[0].shape[:2] if maps[0].dim() == 4 else (0, 0)
        for i, (src, tgt, w) in enumerate(zip(source_tokens, target_tokens, maps)):
            if tuple(w.shape) != (n_layers, n_heads, len(tgt), len(src)) or not src or not tgt:
                raise ValueError(f"maps[{i}] of shape {tuple(w.shape)} must be (L, H, T, S) = ({n_layers}, {n_heads}, "
                                 f"{len(tgt)}, {len(src)}) for its {len(tgt)} target and {len(src)} source tokens")
            if not bool(((w >= 0) & (w <= 1)).all()):
                raise ValueError(f"maps[{i}] must hold attention weights in [0, 1] (no NaN)")
        example = index_in("example", example, n)
        state = dict(layer=index_in("layer", layer, n_layers), head=index_in("head", head, n_heads),
                     step=index_in("step", step, len(target_tokens[example])))
        if question is not None:
            text, rows, spans, threshold = question
            if not isinstance(text, str) or not text or not rows or \
                    not all(isinstance(r, Integral) and not isinstance(r, bool) and r >= 0 for r in rows):
                raise ValueError(f"a question needs text and a non-empty list of output rows, got {text!r}, {rows!r}")
            if len(spans) != n or not all(0 <= a < b <= len(s) for (a, b), s in zip(spans, source_tokens)):
                raise ValueError(f"question spans must be one [start, end) per input inside its source, got {spans!r}")
            if not 0 < threshold <= 1:
                raise ValueError(f"question threshold must be in (0, 1], got {threshold!r}")
            state.update(question=text, question_rows=[int(r) for r in rows],
                         question_spans=[[int(a), int(b)] for a, b in spans], question_threshold=float(threshold))
        micro = [torch.round(w.double() * SCALE).to(torch.int64).tolist() for w in maps]
        super().__init__(source_tokens=[list(s) for s in source_tokens], target_tokens=[list(x) for x in target_tokens],
                         weights=micro, num_layers=int(n_layers), num_heads=int(n_heads), example=example, **state)

    @classmethod
    def from_model(cls, model, sources: list[str], src_vocab, tgt_vocab, max_len: int, **kwargs):
        """Run :func:`cross_attention_maps` on ``sources`` (the model's greedy outputs become the rows)."""
        targets, maps = cross_attention_maps(model, sources, src_vocab, tgt_vocab, max_len)
        return cls([list(s) for s in sources], targets, maps, **kwargs)

    def maps(self) -> list[torch.Tensor]:
        """The shipped maps as drawn. Shape: one (L, H, T_b, S_b) float64 tensor per input."""
        return [torch.tensor(w, dtype=torch.float64) / SCALE for w in self.weights]

    def current(self) -> torch.Tensor:
        """The map on display. Shape: (T, S) float64, queries ↓ keys →."""
        return torch.tensor(self.weights[self.example][self.layer][self.head], dtype=torch.float64) / SCALE

    def current_row(self) -> torch.Tensor:
        """The weights of the output token at ``step`` over the source tokens. Shape: (S,) float64."""
        return self.current()[min(self.step, len(self.target_tokens[self.example]) - 1)]

    def question_scores(self) -> torch.Tensor:
        """:func:`peak_in_span_share` of every head on the shipped maps. Shape: (L, H)."""
        if not self.question:
            raise ValueError("this widget has no question")
        return peak_in_span_share(self.maps(), self.question_rows, self.question_spans)

    def check_answer(self) -> tuple[float, bool]:
        """(score, passed) of the open layer and head: its score reaches the question's threshold."""
        score = float(self.question_scores()[self.layer, self.head])
        return score, score >= self.question_threshold

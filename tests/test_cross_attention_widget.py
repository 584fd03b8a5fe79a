"""The cross-attention widget: its maps against softmax(QK^T/sqrt(d)) recomputed by hand from the decoder's own
inputs, the greedy rows against a plain argmax loop, the question score against a loop, the static fallback and
a live kernel (the page is tested in test_browser_transformer.py, JupyterLab in test_widget_jupyterlab_more.py)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

import attnbook
from attnbook.widgets.cross_attention import SCALE, cross_attention_maps, peak_in_span_share
from kernel_comm import LiveWidget

SOURCES = ["1998年12月31日", "九八年十二月三十一号", "1998.12.31", "公元二〇三一年五月六日"]  # four lengths: padding
SRC_VOCAB = attnbook.SequenceVocab("".join(SOURCES))
TGT_VOCAB = attnbook.SequenceVocab("0123456789-")


def small_model(seed: int, eos_bias: float) -> attnbook.Transformer:
    """Random weights; eos_bias on the <eos> logit makes some outputs end early (seed 3, 0.1: lengths 3, 1, 3, 3)."""
    torch.manual_seed(seed)
    model = attnbook.Transformer(len(SRC_VOCAB), len(TGT_VOCAB), 16, 2, 2, 32, dropout=0.1)  # left in train mode
    with torch.no_grad():
        model.generator.bias[TGT_VOCAB.EOS] += eos_bias
    return model


def greedy_by_hand(model, source: str, max_len: int) -> list[int]:
    """Full forward on the whole prefix each step, argmax over the tokens but <bos> and <pad>, stop at <eos>."""
    src = SRC_VOCAB.encode_batch([source])
    ys = [TGT_VOCAB.BOS]
    for _ in range(max_len):
        logits = model(src, torch.tensor([ys]))[0, -1]
        logits[[TGT_VOCAB.BOS, TGT_VOCAB.PAD]] = -math.inf
        ys.append(int(logits.argmax()))
        if ys[-1] == TGT_VOCAB.EOS:
            break
    return ys[1:]


def cross_weights_by_hand(model, source: str, tokens: list[int]) -> torch.Tensor:
    """Capture each decoder layer's cross-attention inputs (one unpadded source), then softmax(q k^T / sqrt(Dh))
    per head in float64. Shape: -> (L, H, T, S)."""
    captured = []
    hooks = [layer.cross_attn.register_forward_hook(lambda m, args, out: captured.append((m, args[0], args[1])))
             for layer in model.decoder.layers]
    with torch.no_grad():
        model(SRC_VOCAB.encode_batch([source]), torch.tensor([[TGT_VOCAB.BOS] + tokens[:-1]]))
    for h in hooks:
        h.remove()
    maps = []
    for mha, query, memory in captured:
        H, D = mha.num_heads, query.size(-1)
        q = torch.nn.functional.linear(query.double(), mha.w_q.weight.double(), mha.w_q.bias.double())  # (1, T, D)
        k = torch.nn.functional.linear(memory.double(), mha.w_k.weight.double(), mha.w_k.bias.double())  # (1, S, D)
        q, k = q[0].view(-1, H, D // H).transpose(0, 1), k[0].view(-1, H, D // H).transpose(0, 1)  # (H, T|S, Dh)
        maps.append(torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D // H), -1))                   # (H, T, S)
    return torch.stack(maps)


@pytest.mark.parametrize("seed, eos_bias", [(0, 0.0), (3, 0.1)])
def test_maps_are_the_greedy_rows_and_softmax_qk_of_the_decoder(seed, eos_bias):
    model = small_model(seed, eos_bias)
    targets, maps = cross_attention_maps(model, SOURCES, SRC_VOCAB, TGT_VOCAB, max_len=6)   # batched, padded
    assert model.training                                   # its mode is given back
    model.eval()
    for source, target, w in zip(SOURCES, targets, maps):
        tokens = greedy_by_hand(model, source, 6)
        assert target == [TGT_VOCAB.itos[i] for i in tokens]
        assert w.shape == (2, 2, len(tokens), len(source))
        torch.testing.assert_close(w.double(), cross_weights_by_hand(model, source, tokens), rtol=0, atol=1e-6)
    widget = attnbook.CrossAttentionWidget([list(s) for s in SOURCES], targets, maps, example=1, layer=1, head=1)
    for shipped, w in zip(widget.maps(), maps):
        assert (shipped - w.double()).abs().max() <= 0.5 / SCALE + 1e-9                # 6 decimals, rounded
    torch.testing.assert_close(widget.current(), maps[1][1, 1].double(), rtol=0, atol=1e-6)


def test_from_model_ships_the_sources_and_the_greedy_outputs():
    model = small_model(3, 0.1)
    widget = attnbook.CrossAttentionWidget.from_model(model, SOURCES, SRC_VOCAB, TGT_VOCAB, max_len=6)
    targets, maps = cross_attention_maps(model, SOURCES, SRC_VOCAB, TGT_VOCAB, max_len=6)
    assert widget.source_tokens == [list(s) for s in SOURCES] and widget.target_tokens == targets
    assert (widget.num_layers, widget.num_heads) == (2, 2) and widget.question == ""
    with pytest.raises(ValueError, match="no question"):
        widget.question_scores()


def fake_maps(lengths, L=2, H=3, seed=0):
    """Random attention rows. Shape: one (L, H, T, S) tensor per (T, S) in lengths."""
    g = torch.Generator().manual_seed(seed)
    return [torch.softmax(3 * torch.randn(L, H, T, S, generator=g), -1) for T, S in lengths]


def test_question_score_is_the_share_of_rows_whose_peak_is_in_the_span():
    lengths, rows = [(5, 4), (3, 6), (7, 5)], [1, 4]               # input 1 has no row 4: left out
    maps = fake_maps(lengths)
    spans = [(0, 2), (3, 6), (2, 3)]
    expected = torch.zeros(2, 3, dtype=torch.float64)
    for l in range(2):
        for h in range(3):
            pairs = [(i, r) for i, (T, _) in enumerate(lengths) for r in rows if r < T]
            hits = sum(spans[i][0] <= max(range(lengths[i][1]), key=lambda j: maps[i][l, h, r, j]) < spans[i][1]
                       for i, r in pairs)
            expected[l, h] = hits / len(pairs)                      # 5 (input, row) pairs
    torch.testing.assert_close(peak_in_span_share(maps, rows, spans), expected)
    widget = attnbook.CrossAttentionWidget([list("abcd"), list("abcdef"), list("abcde")], [["x"] * T for T, _ in lengths],
                                           maps, question=("q", rows, spans, 0.6))
    torch.testing.assert_close(widget.question_scores(), expected, rtol=0, atol=1e-12)   # on the rounded maps
    for l in range(2):
        for h in range(3):
            widget.layer, widget.head = l, h
            assert widget.check_answer() == (float(expected[l, h]), float(expected[l, h]) >= 0.6)
    tie = [torch.tensor([[[[0.5, 0.5]]]])]                          # ties go to the first key, as on the page
    assert float(peak_in_span_share(tie, [0], [(0, 1)])) == 1.0
    with pytest.raises(ValueError, match="no input has an output row"):
        peak_in_span_share(maps, [9], spans)
    with pytest.raises(ValueError, match="2 spans for 3 maps"):
        peak_in_span_share(maps, rows, spans[:2])


@pytest.mark.parametrize("kwargs, message", [
    (dict(source_tokens=[], target_tokens=[], maps=[]), "one source and one target token list per map"),
    (dict(target_tokens=[["1", "<eos>"]]), r"maps\[0\] of shape \(2, 3, 3, 4\) must be .* = \(2, 3, 2, 4\)"),
    (dict(maps=[torch.full((2, 3, 3, 4), float("nan"))]), r"weights in \[0, 1\]"),
    (dict(maps=[torch.full((2, 3, 3, 4), 1.5)]), r"weights in \[0, 1\]"),
    (dict(head=3), r"head must be an integer in \[0, 3\)"),
    (dict(step=3), r"step must be an integer in \[0, 3\)"),
    (dict(example=True), r"example must be an integer in \[0, 1\)"),
    (dict(question=("", [1], [(0, 2)], 0.5)), "question needs text"),
    (dict(question=("q", [-1], [(0, 2)], 0.5)), "question needs text"),
    (dict(question=("q", [1], [(2, 5)], 0.5)), r"spans must be one \[start, end\)"),
    (dict(question=("q", [1], [(0, 2), (0, 1)], 0.5)), r"spans must be one \[start, end\)"),
    (dict(question=("q", [1], [(0, 2)], 0.0)), r"threshold must be in \(0, 1\]"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    args = dict(source_tokens=[list("abcd")], target_tokens=[["1", "2", "<eos>"]], maps=fake_maps([(3, 4)]))
    with pytest.raises(ValueError, match=message):
        attnbook.CrossAttentionWidget(**{**args, **kwargs})


def test_static_fallback_carries_the_maps_and_stays_light():
    """The chapter's shape (6 inputs, 2 layers x 4 heads, 11 output rows, ~12 source characters), with diffuse
    rows (more digits per weight than a trained model's): the page gains under 60 KB."""
    lengths = [(11, S) for S in (12, 10, 11, 13, 14, 10)]
    maps = fake_maps(lengths, L=2, H=4, seed=1)
    maps = [torch.softmax(0.3 * torch.randn(m.shape, generator=torch.Generator().manual_seed(2)), -1) for m in maps]
    widget = attnbook.CrossAttentionWidget([list("年月日" * 5)[:S] for _, S in lengths],
                                           [list("2031-05-06") + ["<eos>"]] * 6, maps, question=("q", [5, 6],
                                           [(0, 2)] * 6, 0.9))
    page = widget._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state["weights"] == [torch.round(m.double() * SCALE).long().tolist() for m in maps]
    assert state["question_rows"] == [5, 6] and state["question_spans"] == [[0, 2]] * 6
    assert 'data-widget="CrossAttentionWidget"' in page and "function questionScore(" in page
    assert "export default" not in page and not re.search(r"(src|href)=\"?https?://", page)
    assert len(page.encode()) < 60_000


def test_live_kernel_sees_the_controls_and_moves_them():
    setup = ("import attnbook, json, torch\n"
             "g = torch.Generator().manual_seed(0)\n"
             "maps = [torch.softmax(torch.randn(2, 3, T, S, generator=g), -1) for T, S in [(3, 4), (5, 2)]]\n"
             "w = attnbook.CrossAttentionWidget([list('abcd'), list('xy')], [list('12') + ['<eos>'], list('1234') + "
             "['<eos>']], maps, question=('q', [1], [(0, 2), (1, 2)], 0.5))")
    with LiveWidget(setup) as live:
        sent = {"example": 1, "layer": 1, "head": 2, "step": 4}       # what the select and sliders send
        assert live.send(sent) == sorted(sent)
        got = json.loads(live.run("print(json.dumps([w.current_row().tolist(), w.check_answer(), "
                                  "maps[1][1, 2, 4].tolist(), w.question_scores()[1, 2].item()]))"))
        assert got[0] == pytest.approx(got[2], abs=0.5 / SCALE)
        assert got[1] == [got[3], got[3] >= 0.5]
        assert {"step": 0} in live.python_updates("w.step = 0")

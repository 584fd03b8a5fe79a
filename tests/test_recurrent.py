"""attnbook.recurrent against torch.nn.RNNCell/LSTMCell/GRUCell and torch.nn.RNN/LSTM/GRU (float64)."""

import pytest
import torch
from torch import nn

from attnbook.recurrent import (
    Bidirectional,
    GRUCell,
    LSTMCell,
    Recurrent,
    RNNCell,
    gru_step,
    lstm_step,
    rnn_step,
)

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CELLS = {  # ours, torch's cell, torch's layer
    "rnn_tanh": (lambda d, h, **kw: RNNCell(d, h, **kw), lambda d, h, **kw: nn.RNNCell(d, h, **kw), nn.RNN),
    "rnn_relu": (lambda d, h, **kw: RNNCell(d, h, nonlinearity="relu", **kw),
                 lambda d, h, **kw: nn.RNNCell(d, h, nonlinearity="relu", **kw),
                 lambda *a, **kw: nn.RNN(*a, nonlinearity="relu", **kw)),
    "lstm": (lambda d, h, **kw: LSTMCell(d, h, **kw), lambda d, h, **kw: nn.LSTMCell(d, h, **kw), nn.LSTM),
    "gru": (lambda d, h, **kw: GRUCell(d, h, **kw), lambda d, h, **kw: nn.GRUCell(d, h, **kw), nn.GRU),
}


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, device="cpu"):
    return torch.randn(*shape, generator=gen(seed), dtype=F64).to(device)


def state_for(name, b, h, seed, device):
    if name == "lstm":
        return randn(b, h, seed=seed, device=device), randn(b, h, seed=seed + 1, device=device)
    return randn(b, h, seed=seed, device=device)


def assert_state_close(ours, ref):
    if isinstance(ref, tuple):
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    else:
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- cells


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", list(CELLS))
def test_cell_matches_torch_after_load_state_dict(name, bias, device):
    make_ours, make_ref, _ = CELLS[name]
    ref = make_ref(5, 7, bias=bias).to(device, F64)
    ours = make_ours(5, 7, bias=bias).to(device, F64)
    ours.load_state_dict(ref.state_dict())  # strict: same names and shapes
    state, state_ref = state_for(name, 3, 7, 1, device), state_for(name, 3, 7, 1, device)
    for t in range(4):  # a few steps, so errors would compound
        x = randn(3, 5, seed=10 + t, device=device)
        state, state_ref = ours(x, state), ref(x, state_ref)
        assert_state_close(state, state_ref)


@pytest.mark.parametrize("name", list(CELLS))
def test_cell_gradients_match_torch(name):
    make_ours, make_ref, _ = CELLS[name]
    ref = make_ref(4, 6).to(F64)
    ours = make_ours(4, 6).to(F64)
    ours.load_state_dict(ref.state_dict())
    x = randn(2, 4, seed=3)
    out, out_ref = ours(x), ref(x)  # zero initial state
    h, h_ref = (out[0], out_ref[0]) if name == "lstm" else (out, out_ref)
    w = randn(2, 6, seed=4)
    (h * w).sum().backward()
    (h_ref * w).sum().backward()
    for (n, p), (n_ref, p_ref) in zip(ours.named_parameters(), ref.named_parameters()):
        assert n == n_ref
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(CELLS))
def test_default_initialisation_equals_torchs_for_the_same_seed(name):
    make_ours, make_ref, _ = CELLS[name]
    torch.manual_seed(123)
    ref = make_ref(3, 8)
    torch.manual_seed(123)
    ours = make_ours(3, 8)
    for (n, p), (n_ref, p_ref) in zip(ours.state_dict().items(), ref.state_dict().items()):
        assert n == n_ref
        torch.testing.assert_close(p, p_ref, rtol=0, atol=0)


def test_lstm_and_gru_steps_pass_gradcheck():
    g, h, c = randn(2, 12, seed=1), randn(2, 3, seed=2), randn(2, 3, seed=3)
    w, b = randn(12, 3, seed=4), randn(12, seed=5)
    for t in (g, h, c, w, b):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda *a: lstm_step(*a), (g, h, c, w, b))
    g3, w3, b3 = randn(2, 9, seed=6).requires_grad_(), randn(9, 3, seed=7).requires_grad_(), \
        randn(9, seed=8).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: gru_step(*a), (g3, h, w3, b3))


def test_gru_applies_the_reset_gate_after_the_hidden_matmul():
    """torch's GRU: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)). Cho et al.'s original puts r
    before the matmul, W_hn (r * h); with b_hn != 0 the two differ, and we must match torch."""
    cell = GRUCell(2, 3).to(F64)
    x, h = randn(1, 2, seed=1), randn(1, 3, seed=2)
    gi = cell.project_input(x)
    i_r, i_z, i_n = gi.chunk(3, -1)
    w_r, w_z, w_n = cell.weight_hh.chunk(3, 0)
    b_r, b_z, b_n = cell.bias_hh.chunk(3, 0)
    r = torch.sigmoid(i_r + h @ w_r.T + b_r)
    z = torch.sigmoid(i_z + h @ w_z.T + b_z)
    torch_variant = (1 - z) * torch.tanh(i_n + r * (h @ w_n.T + b_n)) + z * h
    cho_variant = (1 - z) * torch.tanh(i_n + (r * h) @ w_n.T + b_n) + z * h
    torch.testing.assert_close(cell(x, h), torch_variant, rtol=1e-12, atol=1e-12)
    assert (cell(x, h) - cho_variant).abs().max() > 1e-3


def test_cells_reject_bad_input():
    cell = LSTMCell(4, 3)
    with pytest.raises(ValueError, match=r"input of shape \(2, 5\) must end in input_size=4"):
        cell(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"one time step x of shape \(B, D\), got \(2, 3, 4\)"):
        cell(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"c of shape \(2, 4\) must be \(B=2, H=3\)"):
        cell(torch.randn(2, 4), (torch.zeros(2, 3), torch.zeros(2, 4)))
    with pytest.raises(ValueError, match="pair"):
        cell(torch.randn(2, 4), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"h of shape \(3, 3\) must be \(B=2, H=3\)"):
        GRUCell(4, 3)(torch.randn(2, 4), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu', got 'gelu'"):
        RNNCell(4, 3, nonlinearity="gelu")
    with pytest.raises(ValueError, match="hidden_size must be a positive int, got 0"):
        GRUCell(4, 0)


# ---------------------------------------------------------------- layers


def load_layer(cell, torch_layer, suffix="_l0"):
    cell.load_state_dict({k[: -len(suffix)]: v for k, v in torch_layer.state_dict().items()
                          if k.endswith(suffix)})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", list(CELLS))
def test_unrolled_layer_matches_torch_batch_first(name, with_state, device):
    make_ours, _, make_layer = CELLS[name]
    ref = make_layer(5, 6, batch_first=True).to(device, F64)
    layer = Recurrent(make_ours(5, 6)).to(device, F64)
    load_layer(layer.cell, ref)
    x = randn(3, 9, 5, seed=1, device=device)
    state = state_for(name, 3, 6, 2, device) if with_state else None
    ref_state = None if state is None else (tuple(s.unsqueeze(0) for s in state) if name == "lstm"
                                            else state.unsqueeze(0))  # torch wants (layers, B, H)
    out, final = layer(x, state)
    out_ref, final_ref = ref(x, ref_state)
    torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-12)
    final_ref = tuple(s[0] for s in final_ref) if name == "lstm" else final_ref[0]
    assert_state_close(final, final_ref)


def bidirectional_pair(name):
    """Our Bidirectional (4 -> 5 per direction) and torch's bidirectional layer, same weights, float64."""
    make_ours, _, make_layer = CELLS[name]
    ref = make_layer(4, 5, batch_first=True, bidirectional=True).to(F64)
    bi = Bidirectional(make_ours(4, 5), make_ours(4, 5)).to(F64)
    load_layer(bi.forward_layer.cell, ref, "_l0")
    load_layer(bi.backward_layer.cell, ref, "_l0_reverse")
    return bi, ref


@pytest.mark.parametrize("name", list(CELLS))
def test_bidirectional_matches_torch_bidirectional(name):
    bi, ref = bidirectional_pair(name)
    x = randn(2, 7, 4, seed=5)
    x_ref = x.clone().requires_grad_(True)
    x = x.requires_grad_(True)
    out, (fin_f, fin_b) = bi(x)
    out_ref, fin_ref = ref(x_ref)
    torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-12)
    # torch stacks the directions: (2, B, H), index 0 forward, 1 backward; LSTM also gives c.
    refs = fin_ref if name == "lstm" else (fin_ref,)
    for i, ref_part in enumerate(refs):
        f_part = fin_f[i] if name == "lstm" else fin_f
        b_part = fin_b[i] if name == "lstm" else fin_b
        torch.testing.assert_close(f_part, ref_part[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(b_part, ref_part[1], rtol=1e-12, atol=1e-12)
    # The backward half's output at t = 0 has read the whole sequence: its gradient reaches x_{T-1}.
    w = randn(*out.shape, seed=6)
    (out * w).sum().backward()
    (out_ref * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-12, atol=1e-12)


def test_reverse_layer_is_the_forward_layer_on_the_flipped_sequence():
    cell = GRUCell(3, 4).to(F64)
    x = randn(2, 6, 3, seed=2)
    out_rev, fin_rev = Recurrent(cell, reverse=True)(x)
    out_fwd, fin_fwd = Recurrent(cell)(x.flip(1))
    torch.testing.assert_close(out_rev, out_fwd.flip(1), rtol=0, atol=0)
    torch.testing.assert_close(fin_rev, fin_fwd, rtol=0, atol=0)


def test_layers_reject_bad_input():
    with pytest.raises(ValueError, match=r"x must be \(B, T, D\) with T >= 1, got \(2, 4\)"):
        Recurrent(GRUCell(4, 3))(torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"x must be \(B, T, D\) with T >= 1, got \(2, 0, 4\)"):
        Recurrent(GRUCell(4, 3))(torch.randn(2, 0, 4))
    with pytest.raises(ValueError, match="cell must be an attnbook RNNCell, LSTMCell or GRUCell, got GRUCell"):
        Recurrent(nn.GRUCell(4, 3))
    with pytest.raises(ValueError, match="same cell type and hidden_size"):
        Bidirectional(GRUCell(4, 3), LSTMCell(4, 3))


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


@pytest.mark.parametrize("name", list(CELLS))
def test_bidirectional_uses_the_given_initial_states(name):
    bi, ref = bidirectional_pair(name)
    x = randn(2, 7, 4, seed=7)
    s_f, s_b = state_for(name, 2, 5, 8, "cpu"), state_for(name, 2, 5, 10, "cpu")
    if name == "lstm":   # torch stacks the directions: h0, c0 of shape (2, B, H)
        out_ref, _ = ref(x, (torch.stack([s_f[0], s_b[0]]), torch.stack([s_f[1], s_b[1]])))
    else:
        out_ref, _ = ref(x, torch.stack([s_f, s_b]))
    out, _ = bi(x, (s_f, s_b))
    torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-12)


def test_cell_details_named_and_documented():
    for kwargs, message in [({"input_size": 0}, "^input_size must be"), ({"input_size": True}, "^input_size must be")]:
        with pytest.raises(ValueError, match=message):
            GRUCell(hidden_size=3, **kwargs)
    with pytest.raises(ValueError, match=r"^an LSTM state is a pair \(h, c\)$"):
        LSTMCell(2, 3)(torch.zeros(1, 2), torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"^h of shape \(2, 3\) must be \(B=1, H=3\)"):
        LSTMCell(2, 3)(torch.zeros(1, 2), (torch.zeros(2, 3), torch.zeros(1, 3)))
    with pytest.raises(ValueError, match="^both directions need the same cell type and hidden_size"):
        Bidirectional(GRUCell(2, 3), LSTMCell(2, 3))
    assert GRUCell(2, 3).extra_repr() == "2, 3, bias=True" and GRUCell(2, 3, bias=False).extra_repr().endswith("False")
    one = RNNCell(1, 2).to(F64)  # one input feature is valid; tanh is the default nonlinearity
    x = randn(3, 1, seed=11)
    torch.testing.assert_close(one(x), torch.tanh(x @ one.weight_ih.T + one.bias_ih + one.bias_hh))
    gi, h = randn(3, 2, seed=12), randn(3, 2, seed=13)
    torch.testing.assert_close(rnn_step(gi, h, one.weight_hh, None), torch.tanh(gi + h @ one.weight_hh.T))
    # project_input takes any (..., D), also one unbatched step (D,).
    torch.testing.assert_close(one.project_input(x[0]), one.weight_ih @ x[0] + one.bias_ih)


def test_cells_start_from_zeros_on_the_inputs_device():
    cell = LSTMCell(2, 3).to("meta")  # meta stands in for CUDA
    h, c = cell(torch.zeros(4, 2, device="meta"))
    assert h.device.type == c.device.type == "meta"

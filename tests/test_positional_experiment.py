"""The length-generalisation experiment of the chapter 「位置编码」: its data, its model, its training; a RoPE
model's swapped frequencies (rope_scaling), against apply_rotary at interpolated positions.

Breaks seen to fail: the forward ignoring rope_scaling's attention factor; ignoring its frequencies."""

import pytest
import torch

from attnbook.positional_experiment import (
    IGNORE,
    SCHEMES,
    PositionTaskModel,
    previous_token_batch,
    train_position_model,
)


def test_previous_token_targets():
    x, y = previous_token_batch(4, 7, vocab=5, generator=torch.Generator().manual_seed(0))
    assert (y[:, 0] == IGNORE).all()
    torch.testing.assert_close(y[:, 1:], x[:, :-1])
    assert 0 <= int(x.min()) and int(x.max()) < 5
    with pytest.raises(ValueError, match="length must be >= 2"):
        previous_token_batch(4, 1, 5, torch.Generator())


def test_without_positions_a_causal_layer_cannot_see_the_order_of_the_prefix():
    torch.manual_seed(0)
    x = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    shuffled = x.clone()
    shuffled[0, :6] = x[0, torch.tensor([5, 2, 0, 4, 1, 3])]  # permute tokens 0..5, keep 6 and 7
    for scheme in SCHEMES:
        model = PositionTaskModel(scheme, vocab=10).eval()
        if model.t5 is not None:
            torch.nn.init.normal_(model.t5.bias.weight)  # it starts at zero, i.e. as "no bias"
        with torch.no_grad():
            same = torch.allclose(model(x)[0, 6:], model(shuffled)[0, 6:], atol=1e-6)
        assert same == (scheme == "none"), scheme  # every position scheme sees the new order


def test_model_rejects_bad_arguments_and_the_learned_table_its_length():
    with pytest.raises(ValueError, match="scheme must be one of"):
        PositionTaskModel("fourier")
    with pytest.raises(ValueError, match="heads of even size"):
        PositionTaskModel("rope", d_model=12, num_heads=4)
    model = PositionTaskModel("learned", vocab=10, max_len=8)
    with pytest.raises(ValueError, match="T=9 exceeds max_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_training_is_deterministic_and_rope_learns_the_task():
    a = train_position_model("rope", steps=120, eval_sequences=100, seed=3)
    b = train_position_model("rope", steps=120, eval_sequences=100, seed=3)
    assert (a.acc_train_len, a.acc_double_len, a.final_loss) == (b.acc_train_len, b.acc_double_len, b.final_loss)
    assert a.acc_train_len > 0.95 and a.acc_unseen_positions > 0.9
    threads = torch.get_num_threads()
    none = train_position_model("none", steps=120, eval_sequences=100, seed=3)
    assert torch.get_num_threads() == threads  # the one-thread pin is undone
    assert none.acc_train_len < 0.5  # no position information: far from solved


def _rope_model(seed=0):
    torch.manual_seed(seed)
    return PositionTaskModel("rope", vocab=10).double().eval()


def test_rope_scaling_none_equals_the_default_and_linear_equals_interpolated_positions():
    from attnbook import apply_rotary
    from attnbook.attention import scaled_dot_product_attention
    from attnbook.masks import causal_mask
    from attnbook.rope_scaling import scaled_frequencies

    model = _rope_model()
    x = torch.randint(0, 10, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        default = model(x)
        model.rope_scaling = scaled_frequencies("none", 8, 10000.0, 3.0, 4)
        torch.testing.assert_close(model(x), default, rtol=1e-12, atol=1e-12)
        model.rope_scaling = scaled_frequencies("linear", 8, 10000.0, 3.0, 4)
        scaled = model(x)
        # reference: the same layer by hand, positions 0, 1/3, 2/3, ... (position interpolation)
        h = model.embed(x)
        q, k, v = model.qkv(h).view(2, 9, 3, 4, 8).permute(2, 0, 3, 1, 4)
        pos = torch.arange(9, dtype=torch.float64) / 3
        a, _ = scaled_dot_product_attention(apply_rotary(q, pos), apply_rotary(k, pos), v, causal_mask(9))
        ref = model.readout(model.norm(h + model.out(a.transpose(1, 2).reshape(2, 9, -1))))
    torch.testing.assert_close(scaled, ref, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(scaled, default)


def test_attention_factor_scales_q_and_k():
    model = _rope_model()
    x = torch.randint(0, 10, (1, 7), generator=torch.Generator().manual_seed(2))
    w = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    with torch.no_grad():
        model.rope_scaling = (w, 1.5)
        scaled = model(x)
        model.rope_scaling = None
        model.qkv.weight[:64] *= 1.5                                  # W_q and W_k rows, their biases too
        model.qkv.bias[:64] *= 1.5
        torch.testing.assert_close(scaled, model(x), rtol=1e-10, atol=1e-10)


def test_position_accuracy_and_fit():
    from attnbook.positional_experiment import fit_position_model, position_accuracy

    model = _rope_model().float()
    acc, correct = position_accuracy(model, 12, 10, 5, seed=7)
    x, y = previous_token_batch(5, 12, 10, torch.Generator().manual_seed(7))
    with torch.no_grad():
        hits = (model(x).argmax(-1) == y)[:, 1:]
    assert acc == pytest.approx(float(hits.float().mean())) and torch.equal(correct, model(x).argmax(-1) == y)
    losses = [fit_position_model(_rope_model(1).float(), 8, 10, 5, 4, 1e-2, torch.Generator().manual_seed(3))
              for _ in range(2)]
    assert losses[0] == losses[1] and losses[0] > 0
    with pytest.raises(ValueError, match="min_len <= max_len"):
        fit_position_model(model, 2, 10, 5, 4, 1e-2, torch.Generator(), min_len=3)


def test_position_attention_weights_alibi_without_content_is_the_bare_bias():
    """With W_q = W_k = 0 the scores are the ALiBi bias alone: weights softmax_n(-s_h (m - n)) over n <= m,
    written out here without the package; every scheme's weights are causal rows that sum to 1."""
    import math

    from attnbook.positional_experiment import position_attention_weights

    torch.manual_seed(0)
    model = PositionTaskModel("alibi", vocab=8, d_model=16, num_heads=4)
    with torch.no_grad():
        model.qkv.weight[:32] = 0                                     # W_q and W_k rows
        model.qkv.bias[:32] = 0
    w = position_attention_weights(model, 6, 8, 3, seed=1)           # (H, T, T)
    for h, s in enumerate([1 / 4, 1 / 16, 1 / 64, 1 / 256]):
        for m in range(6):
            e = [math.exp(-s * (m - n)) for n in range(m + 1)]
            assert w[h, m, : m + 1].tolist() == pytest.approx([v / sum(e) for v in e], abs=1e-6)
    for scheme in SCHEMES:
        w = position_attention_weights(PositionTaskModel(scheme, vocab=8, d_model=16, num_heads=4), 7, 8, 2, seed=2)
        assert w.shape == (4, 7, 7) and float(w.triu(1).abs().max()) == 0
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 7))

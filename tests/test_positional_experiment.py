"""The length-generalisation experiment of the chapter 「位置编码」: its data, its model, its training."""

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

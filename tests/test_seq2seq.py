"""attnbook.tasks and attnbook.seq2seq: the task generator, an independent torch re-implementation of
both encoder-decoders, teacher forcing vs greedy decoding, and training that actually lowers the loss."""

import itertools

import pytest
import torch
from torch import nn

from attnbook.seq2seq import Seq2Seq, evaluate_seq2seq, sequence_loss, train_seq2seq
from attnbook.tasks import BOS, EOS, DigitTask

F64 = torch.float64


# ---------------------------------------------------------------- tasks


def test_targets_and_decoder_io():
    src = torch.tensor([[3, 4, 5], [12, 3, 7]])
    torch.testing.assert_close(DigitTask("copy").target(src), src)
    torch.testing.assert_close(DigitTask("reverse").target(src), torch.tensor([[5, 4, 3], [7, 3, 12]]))
    tgt_in, tgt_out = DigitTask.decoder_io(src)
    assert tgt_in.tolist() == [[BOS, 3, 4, 5], [BOS, 12, 3, 7]]
    assert tgt_out.tolist() == [[3, 4, 5, EOS], [12, 3, 7, EOS]]


def test_sampling_is_deterministic_given_a_seed():
    task = DigitTask("reverse", seed=3)
    a = task.sample(50, 6, "train", torch.Generator().manual_seed(7))
    b = task.sample(50, 6, "train", torch.Generator().manual_seed(7))
    c = task.sample(50, 6, "train", torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])
    assert a[0].min() >= 3 and a[0].max() < task.vocab_size
    torch.testing.assert_close(a[1], a[0].flip(-1))


def test_held_out_split_is_disjoint_and_about_the_requested_size():
    task = DigitTask("copy", train_lengths=(2, 8), max_length=12, test_fraction=0.2, seed=0)
    every = torch.tensor(list(itertools.product(range(3, 13), repeat=3)))  # all 1000 strings of length 3
    held = task.is_held_out(every)
    assert 0.12 < held.float().mean() < 0.28
    g = torch.Generator().manual_seed(0)
    train = {tuple(r) for r in task.sample(3000, 3, "train", g)[0].tolist()}
    test = {tuple(r) for r in task.sample(3000, 3, "test", g)[0].tolist()}
    assert train.isdisjoint(test)
    assert len(train) + len(test) > 900  # nearly all 1000 strings were drawn, each on its own side
    assert test == {tuple(r) for r in every[held].tolist()}
    # Lengths beyond training are held out entirely; another seed holds out other strings.
    assert task.is_held_out(torch.full((4, 10), 5)).all()
    assert not torch.equal(held, DigitTask("copy", train_lengths=(2, 8), max_length=12, seed=1).is_held_out(every))


def test_task_rejects_bad_arguments():
    task = DigitTask("copy", train_lengths=(2, 8), max_length=12)
    with pytest.raises(ValueError, match=r"length 10 is outside the training lengths \(2, 8\)"):
        task.sample(4, 10, "train")
    with pytest.raises(ValueError, match=r"length must lie in \[1, 12\], got 13"):
        task.sample(4, 13, "test")
    with pytest.raises(ValueError, match="split must be 'train' or 'test', got 'dev'"):
        task.sample(4, 3, "dev")
    with pytest.raises(ValueError, match="kind must be 'copy' or 'reverse', got 'sort'"):
        DigitTask("sort")
    with pytest.raises(ValueError, match=r"train_lengths=\(2, 30\), max_length=24"):
        DigitTask("copy", train_lengths=(2, 30))


# ---------------------------------------------------------------- models


def reference_logits(model: Seq2Seq, src, tgt_in):
    """The same network written with torch.nn.GRU / nn.GRUCell and einsum, weights copied over."""
    enc = nn.GRU(model.encoder.cell.input_size, model.encoder.cell.hidden_size, batch_first=True).double()
    enc.load_state_dict({f"{k}_l0": v for k, v in model.encoder.cell.state_dict().items()})
    dec = nn.GRUCell(model.decoder.input_size, model.decoder.hidden_size).double()
    dec.load_state_dict(model.decoder.state_dict())
    h_all, h_last = enc(model.embed(src))  # (B, S, H), (1, B, H)
    s = h_last[0]
    logits = []
    for t in range(tgt_in.size(1)):
        if model.attention:
            w_q, w_k, v = model.score.w_q.weight, model.score.w_k.weight, model.score.v
            e = torch.einsum("a,bja->bj", v, torch.tanh((s @ w_q.T)[:, None] + h_all @ w_k.T))  # (B, S)
            c = torch.einsum("bj,bjh->bh", torch.softmax(e, -1), h_all)
        else:
            c = h_last[0]
        s = dec(torch.cat([model.embed(tgt_in[:, t]), c], -1), s)
        logits.append(model.out(torch.cat([s, c], -1)))
    return torch.stack(logits, 1)


@pytest.mark.parametrize("attention", [False, True])
def test_model_equals_an_independent_torch_implementation(attention):
    torch.manual_seed(0)
    model = Seq2Seq(13, embed_dim=6, hidden_size=8, attention=attention).double()
    src, tgt_in = torch.randint(3, 13, (3, 5)), torch.randint(0, 13, (3, 4))
    logits, weights = model(src, tgt_in)
    assert logits.shape == (3, 4, 13)
    torch.testing.assert_close(logits, reference_logits(model, src, tgt_in), rtol=1e-10, atol=1e-12)
    if attention:
        assert weights.shape == (3, 4, 5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, dtype=F64))
    else:
        assert weights is None


@pytest.mark.parametrize("attention", [False, True])
def test_teacher_forcing_on_the_greedy_output_reproduces_greedy_decoding(attention):
    torch.manual_seed(1)
    model = Seq2Seq(13, embed_dim=6, hidden_size=8, attention=attention).double()
    src = torch.randint(3, 13, (4, 6))
    tokens, logits, weights = model.greedy_decode(src, 7)
    assert tokens.shape == (4, 7) and logits.shape == (4, 7, 13)
    torch.testing.assert_close(tokens, logits.argmax(-1))
    tgt_in = torch.cat([torch.full((4, 1), BOS), tokens[:, :-1]], 1)  # what greedy decoding fed itself
    with torch.no_grad():
        tf_logits, tf_weights = model(src, tgt_in)
    torch.testing.assert_close(tf_logits, logits, rtol=1e-12, atol=1e-12)
    if attention:
        torch.testing.assert_close(tf_weights, weights, rtol=1e-12, atol=1e-12)


def test_gradient_reaches_every_parameter_of_the_attention_model():
    torch.manual_seed(2)
    model = Seq2Seq(13, embed_dim=6, hidden_size=8, attention=True)
    src, tgt = torch.randint(3, 13, (4, 5)), torch.randint(3, 13, (4, 5))
    tgt_in, tgt_out = DigitTask.decoder_io(tgt)
    sequence_loss(model(src, tgt_in)[0], tgt_out).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("attention", [False, True])
def test_a_few_training_steps_reduce_the_loss(attention):
    torch.manual_seed(0)
    task = DigitTask("copy", train_lengths=(2, 4), max_length=6)
    model = Seq2Seq(task.vocab_size, embed_dim=8, hidden_size=16, attention=attention)
    threads = torch.get_num_threads()
    log = train_seq2seq(model, task, steps=40, batch_size=32, lr=1e-2, seed=0)
    assert torch.get_num_threads() == threads  # restored
    assert len(log["loss"]) == 40 and log["sequences"] == 40 * 32
    first, last = sum(log["loss"][:5]) / 5, sum(log["loss"][-5:]) / 5
    assert first > 2.0  # ~ log(13) at the start
    assert last < 0.8 * first


def test_the_training_log_prints_in_chinese_the_mean_loss_of_each_window(capsys):
    task = DigitTask("copy", train_lengths=(2, 4), max_length=6)
    model = Seq2Seq(task.vocab_size, embed_dim=4, hidden_size=4, attention=False)
    log = train_seq2seq(model, task, steps=6, batch_size=4, seed=0, log_every=3)
    lines = capsys.readouterr().out.splitlines()
    means = [sum(log["loss"][:3]) / 3, sum(log["loss"][3:]) / 3]   # the two windows of 3 steps
    assert lines == [f"第 3/6 步  损失 {means[0]:.3f}", f"第 6/6 步  损失 {means[1]:.3f}"]

def test_evaluation_of_a_model_that_always_says_eos():
    task = DigitTask("copy", train_lengths=(2, 4), max_length=6)
    model = Seq2Seq(task.vocab_size, embed_dim=4, hidden_size=4, attention=False)
    with torch.no_grad():
        model.out.weight.zero_()
        model.out.bias.fill_(0.0)
        model.out.bias[EOS] = 1.0
    res = evaluate_seq2seq(model, task, [2, 5], n=10)
    assert res["length"] == [2, 5]
    assert res["token_accuracy"] == pytest.approx([1 / 3, 1 / 6])  # only the final EOS is right
    assert res["sequence_accuracy"] == [0.0, 0.0]


def test_models_reject_bad_input():
    model = Seq2Seq(13, embed_dim=4, hidden_size=4)
    with pytest.raises(ValueError, match=r"src must be \(B, T_src\) token ids with T_src >= 1, got \(3,\)"):
        model(torch.randint(3, 13, (3,)), torch.randint(3, 13, (3, 2)))
    with pytest.raises(ValueError, match=r"tgt_in of shape \(2, 2\) must be \(B=3, T\)"):
        model(torch.randint(3, 13, (3, 4)), torch.randint(3, 13, (2, 2)))
    with pytest.raises(ValueError, match="steps and batch_size must be >= 1, got 0, 8"):
        train_seq2seq(model, DigitTask(), steps=0, batch_size=8)


def test_decay_lr_lowers_the_rate_linearly_and_leaves_the_constant_run_alone():
    task = DigitTask("copy", train_lengths=(2, 3), max_length=4)
    torch.manual_seed(0)
    log = train_seq2seq(Seq2Seq(task.vocab_size, embed_dim=4, hidden_size=4), task, steps=4, batch_size=2,
                        lr=0.1, decay_lr=True)
    assert log["lr"] == pytest.approx([0.1, 0.075, 0.05, 0.025])  # lr * (1 - i / steps)
    torch.manual_seed(0)
    log = train_seq2seq(Seq2Seq(task.vocab_size, embed_dim=4, hidden_size=4), task, steps=4, batch_size=2, lr=0.1)
    assert log["lr"] == [0.1] * 4

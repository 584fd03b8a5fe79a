"""attnbook.word2vec: pairs and windows vs brute force, the SGNS/CBOW loss vs hand computation and autograd,
negative sampling vs its distribution, and training that lowers the loss."""

import math

import pytest
import torch

from attnbook.word2vec import (
    CBOW, SkipGram, cbow_loss, cbow_windows, flatten_corpus, keep_probabilities, noise_distribution,
    sample_negatives, sgns_loss, skipgram_pairs, train_word2vec,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_flatten_corpus():
    ids, sent = flatten_corpus([torch.tensor([4, 5]), torch.tensor([6]), torch.tensor([7, 8, 9])])
    assert ids.tolist() == [4, 5, 6, 7, 8, 9] and sent.tolist() == [0, 0, 1, 2, 2, 2]


def test_keep_probabilities_and_noise_distribution_by_hand():
    counts = torch.tensor([900, 90, 10])
    keep = keep_probabilities(counts, t=0.01)
    assert keep.tolist() == pytest.approx([math.sqrt(0.01 / 0.9), math.sqrt(0.01 / 0.09), 1.0], rel=1e-6)
    p = noise_distribution(counts)
    z = 900 ** 0.75 + 90 ** 0.75 + 10 ** 0.75
    assert p.tolist() == pytest.approx([900 ** 0.75 / z, 90 ** 0.75 / z, 10 ** 0.75 / z], rel=1e-6)
    with pytest.raises(ValueError, match="t must be > 0"):
        keep_probabilities(counts, t=0)


def test_sample_negatives_shape_and_frequencies():
    noise = noise_distribution(torch.tensor([600, 300, 100, 0]))
    neg = sample_negatives(noise, 4000, 5, torch.Generator().manual_seed(0))
    assert neg.shape == (4000, 5) and neg.dtype == torch.long
    freq = torch.bincount(neg.flatten(), minlength=4).double() / neg.numel()
    # 20,000 draws: the standard error of each frequency is below 0.004
    torch.testing.assert_close(freq, noise.double(), atol=0.015, rtol=0)
    assert freq[3] == 0  # a word with count 0 is never drawn
    with pytest.raises(ValueError, match="k >= 1"):
        sample_negatives(noise, 3, 0)


def _brute_force_pairs(ids, sent, b):
    pairs = []
    for i in range(len(ids)):
        for j in range(len(ids)):
            if i != j and sent[i] == sent[j] and abs(i - j) <= b[i]:
                pairs.append((ids[i], ids[j]))
    return sorted(pairs)


@pytest.mark.parametrize("window", [1, 2, 3])
def test_skipgram_pairs_match_brute_force_with_the_same_dynamic_windows(window):
    ids, sent = flatten_corpus([torch.arange(10, 17), torch.arange(20, 23), torch.tensor([30])])
    b = torch.randint(1, window + 1, (len(ids),), generator=torch.Generator().manual_seed(5))
    c, o = skipgram_pairs(ids, sent, window, torch.Generator().manual_seed(5))
    assert sorted(zip(c.tolist(), o.tolist())) == _brute_force_pairs(ids.tolist(), sent.tolist(), b.tolist())
    if window == 1:  # b == 1 everywhere: every neighbour in the same sentence, both directions
        assert len(c) == 2 * (6 + 2)
    with pytest.raises(ValueError, match="window must be >= 1"):
        skipgram_pairs(ids, sent, 0)


def test_cbow_windows_match_brute_force():
    ids, sent = flatten_corpus([torch.arange(10, 16), torch.tensor([30]), torch.arange(40, 43)])
    b = torch.randint(1, 3, (len(ids),), generator=torch.Generator().manual_seed(2))
    tgt, ctx, mask = cbow_windows(ids, sent, 2, torch.Generator().manual_seed(2))
    expected = []
    for i in range(len(ids)):
        c = sorted(int(ids[j]) for j in range(len(ids)) if j != i and sent[j] == sent[i] and abs(i - j) <= b[i])
        if c:
            expected.append((int(ids[i]), c))
    got = [(int(t), sorted(x[m].tolist())) for t, x, m in zip(tgt, ctx, mask)]
    assert got == expected and 30 not in tgt.tolist()  # the one-word sentence has no context
    assert ctx.shape == mask.shape == (len(expected), 4)


def test_sgns_loss_hand_computed():
    v = torch.tensor([[1.0, 2.0]])                  # centre
    u = torch.tensor([[0.5, -0.25]])                # context: u.v = 0
    n = torch.tensor([[[1.0, 0.0], [0.0, -1.0]]])   # negatives: n.v = 1, -2
    expected = -math.log(sigmoid(0.0)) - math.log(sigmoid(-1.0)) - math.log(sigmoid(2.0))
    assert sgns_loss(v, u, n).item() == pytest.approx(expected, rel=1e-6)
    # batch mean
    v2 = torch.cat([v, torch.zeros(1, 2)])
    u2, n2 = torch.cat([u, u]), torch.cat([n, n])
    assert sgns_loss(v2, u2, n2).item() == pytest.approx((expected + 3 * math.log(2)) / 2, rel=1e-6)


def test_sgns_gradient_matches_the_closed_form_in_float64():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    u = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    n = torch.randn(3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    sgns_loss(v, u, n).backward()
    with torch.no_grad():
        sp = torch.sigmoid((u * v).sum(-1))                      # (B,)
        sn = torch.sigmoid(torch.einsum("bkd,bd->bk", n, v))     # (B, K)
        dv = ((sp - 1)[:, None] * u + (sn[..., None] * n).sum(1)) / 3
        torch.testing.assert_close(v.grad, dv)
        torch.testing.assert_close(u.grad, (sp - 1)[:, None] * v / 3)
        torch.testing.assert_close(n.grad, sn[..., None] * v[:, None, :] / 3)
    assert torch.autograd.gradcheck(sgns_loss, (v.detach().requires_grad_(), u.detach().requires_grad_(),
                                                n.detach().requires_grad_()))


def test_sgns_loss_is_finite_for_huge_scores():
    v = torch.tensor([[100.0]])
    loss = sgns_loss(v, torch.tensor([[-1.0]]), torch.tensor([[[1.0]]]))  # u.v = -100, n.v = 100
    assert loss.item() == pytest.approx(200.0, rel=1e-6)


def test_sgns_loss_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"need centre \(B, D\), context \(B, D\), negatives \(B, K, D\); "
                                         r"got \(2, 3\), \(2, 3\), \(2, 5, 4\)"):
        sgns_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 5, 4))


def test_cbow_loss_is_sgns_on_the_masked_mean():
    g = torch.Generator().manual_seed(1)
    ctx, tgt, neg = torch.randn(2, 4, 3, generator=g), torch.randn(2, 3, generator=g), torch.randn(2, 5, 3, generator=g)
    mask = torch.tensor([[True, False, True, False], [True, True, True, True]])
    h = torch.stack([ctx[0, [0, 2]].mean(0), ctx[1].mean(0)])
    torch.testing.assert_close(cbow_loss(ctx, mask, tgt, neg), sgns_loss(h, tgt, neg))
    with pytest.raises(ValueError, match="at least one context word"):
        cbow_loss(ctx, torch.zeros(2, 4, dtype=torch.bool), tgt, neg)


@pytest.mark.parametrize("device", DEVICES)
def test_models_compute_the_loss_of_their_rows(device):
    torch.manual_seed(0)
    m = SkipGram(10, 4).to(device)
    torch.nn.init.normal_(m.context.weight)
    c, o, neg = (torch.tensor([1, 2], device=device), torch.tensor([3, 4], device=device),
                 torch.tensor([[5, 6], [7, 8]], device=device))
    ref = sgns_loss(m.centre.weight[c], m.context.weight[o], m.context.weight[neg])
    torch.testing.assert_close(m(c, o, neg), ref)
    cb = CBOW(10, 4).to(device)
    torch.nn.init.normal_(cb.context.weight)
    ctx, mask = torch.tensor([[1, 2], [3, 0]], device=device), torch.tensor([[True, True], [True, False]], device=device)
    ref = cbow_loss(cb.centre.weight[ctx], mask, cb.context.weight[o], cb.context.weight[neg])
    torch.testing.assert_close(cb(ctx, mask, o, neg), ref)


def _toy_corpus():
    """Two topics that never mix: words 0-4 co-occur, words 5-9 co-occur."""
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 5, (8,), generator=g) + 5 * (s % 2) for s in range(300)]


@pytest.mark.parametrize("model_cls", [SkipGram, CBOW])
def test_training_lowers_the_loss_and_separates_topics(model_cls):
    torch.manual_seed(0)
    sents = _toy_corpus()
    counts = torch.bincount(torch.cat(sents), minlength=10)
    model = model_cls(10, 8)
    hist = train_word2vec(model, sents, counts, epochs=8, window=2, negatives=3, batch_size=256, lr=0.05,
                          subsample=None, seed=0, log=False)
    first, last = sum(hist["loss"][:3]) / 3, sum(hist["loss"][-3:]) / 3
    assert last < 0.8 * first
    w = torch.nn.functional.normalize(model.vectors(), dim=1)
    sims = w @ w.T
    same = (sims[:5, :5].sum() - 5) / 20
    cross = sims[:5, 5:].mean()
    assert same > cross + 0.5


def test_training_is_deterministic_and_sgd_variant_runs(capsys):
    sents = _toy_corpus()
    counts = torch.bincount(torch.cat(sents), minlength=10)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = SkipGram(10, 4)
        runs.append(train_word2vec(m, sents, counts, epochs=2, batch_size=128, seed=3, log=False)["loss"])
    assert runs[0] == runs[1]
    torch.manual_seed(0)
    h = train_word2vec(SkipGram(10, 4), sents, counts, epochs=2, batch_size=128, optimizer="sgd", lr=0.05)
    assert h["loss"][-1] < h["loss"][0]
    out = capsys.readouterr()
    assert "第 2/2 轮" in out.out and out.err == ""  # progress on stdout only
    with pytest.raises(ValueError, match="counts must be \\(10,\\)"):
        train_word2vec(SkipGram(10, 4), sents, counts[:5])
    with pytest.raises(ValueError, match="optimizer must be 'adam' or 'sgd'"):
        train_word2vec(SkipGram(10, 4), sents, counts, optimizer="lbfgs")

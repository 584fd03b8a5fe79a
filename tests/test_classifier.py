"""attnbook.classifier: padding invariance, masked pooling, training, the TF-IDF logistic-regression baseline."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

import attnbook

from attnbook import (CharVocab, LogisticRegression, SelfAttentionClassifier, char_ngrams, confusion_matrix,
                      encode_texts, length_batches, masked_mean, predict, tfidf_features, train_classifier,
                      train_logistic_regression)
from attnbook.classifier import PAD_ID, UNK_ID

F64 = torch.float64


def tiny_model(seed=0, **kw):
    torch.manual_seed(seed)
    return SelfAttentionClassifier(vocab_size=20, d_model=16, num_heads=4, max_len=32, **kw).eval()


def test_appending_padding_leaves_the_logits_unchanged():
    model = tiny_model(dropout=0.3, attn_dropout=0.2)               # eval mode: dropout is off
    ids = torch.tensor([[5, 7, 2, 9, 3]])
    logits, w = model(ids)
    for extra in (1, 4, 20):
        padded = torch.cat([ids, torch.full((1, extra), PAD_ID)], 1)
        logits_p, w_p = model(padded)
        torch.testing.assert_close(logits_p, logits, rtol=1e-6, atol=1e-6)
        assert (w_p[..., 5:] == 0).all()                              # no query looks at padding
        torch.testing.assert_close(w_p[:, :, :5, :5], w[:, :, :5, :5], rtol=1e-6, atol=1e-7)


def test_batched_logits_equal_one_text_at_a_time():
    model = tiny_model()
    texts = [[3, 4], [5, 6, 7, 8, 9, 10], [11]]
    ids = torch.full((3, 6), PAD_ID)
    for i, t in enumerate(texts):
        ids[i, :len(t)] = torch.tensor(t)
    batched, _ = model(ids)
    single = torch.cat([model(torch.tensor([t]))[0] for t in texts])
    torch.testing.assert_close(batched, single, rtol=1e-6, atol=1e-6)
    by_predict = predict(model, ids, torch.tensor([2, 6, 1]), batch_size=2)  # sorted by length inside
    torch.testing.assert_close(by_predict, single, rtol=1e-6, atol=1e-6)


def test_masked_mean_equals_an_explicit_mean_over_the_real_tokens():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, 5, generator=g, dtype=F64)
    lengths = [7, 3, 1, 0]
    mask = torch.arange(7) < torch.tensor(lengths)[:, None]
    out = masked_mean(x, mask)
    for b, n in enumerate(lengths):
        expected = x[b, :n].mean(0) if n else torch.zeros(5, dtype=F64)  # an empty text pools to zero
        torch.testing.assert_close(out[b], expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(x[1].mean(0), out[1])                    # the unmasked mean (the seed's) differs
    with pytest.raises(ValueError, match=r"mask must be torch.bool of shape x.shape\[:2\] = \(4, 7\)"):
        masked_mean(x, mask[:, :6])


def test_model_pools_only_real_tokens():
    """The pooled vector the head sees equals the mean of the encoder states over the real tokens."""
    model = tiny_model()
    ids = torch.tensor([[4, 5, 6, PAD_ID, PAD_ID]])
    seen = {}
    model.head.register_forward_hook(lambda m, inp, out: seen.setdefault("pooled", inp[0]))
    model.norm.register_forward_hook(lambda m, inp, out: seen.setdefault("h", out))
    model(ids)
    torch.testing.assert_close(seen["pooled"][0], seen["h"][0, :3].mean(0), rtol=1e-6, atol=1e-7)


def test_source_pooling_averages_every_position_so_padding_moves_the_logits():
    """pool="all" (the source's attended.mean(dim=1)): the head sees the mean over all T positions, padding included."""
    model = tiny_model(pool="all")
    ids = torch.tensor([[4, 5, 6, PAD_ID, PAD_ID]])
    seen = {}
    hooks = [model.head.register_forward_hook(lambda m, inp, out: seen.update(pooled=inp[0])),
             model.norm.register_forward_hook(lambda m, inp, out: seen.update(h=out))]
    logits, _ = model(ids)
    torch.testing.assert_close(seen["pooled"][0], seen["h"][0].mean(0), rtol=1e-6, atol=1e-7)
    for hook in hooks:
        hook.remove()
    assert logits.shape == (1, 2) and (model(ids[:, :3])[0] - logits).abs().max() > 1e-3   # two pads fewer: other logits
    with pytest.raises(ValueError, match="pool must be 'real'"):
        tiny_model(pool="mean")


def test_ablation_without_attention_is_layernorm_then_mean_of_the_real_tokens():
    """attention=False: logits = head(mean over real t of LayerNorm(E[c_t] + PE(t))), written out with F.layer_norm."""
    model = tiny_model(attention=False)
    assert model.attn is None
    ids = torch.tensor([[4, 5, 6, PAD_ID, PAD_ID], [7, 8, 9, 10, 11]])
    logits, weights = model(ids)
    assert weights is None
    x = model.embed.weight[ids] + attnbook.sinusoidal_encoding(32, 16)[:5]            # (2, 5, 16)
    h = F.layer_norm(x, (16,), model.norm.weight, model.norm.bias, model.norm.eps)
    pooled = torch.stack([h[0, :3].mean(0), h[1].mean(0)])
    torch.testing.assert_close(logits, pooled @ model.head.weight.T + model.head.bias, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model(ids[:1, :3])[0], logits[:1], rtol=1e-6, atol=1e-6)  # padding changes nothing


def toy_reviews(n, seed):
    """Texts of random filler characters with one '好' (positive) or '差' (negative) somewhere."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        y = rng.randrange(2)
        chars = [rng.choice("一二三四五六七八九十") for _ in range(rng.randint(2, 12))]
        chars.insert(rng.randrange(len(chars) + 1), "好" if y else "差")
        texts.append("".join(chars))
        labels.append(y)
    return texts, torch.tensor(labels)


def test_training_reduces_the_loss_and_learns_a_toy_rule(capsys):
    train_t, train_y = toy_reviews(320, 0)
    test_t, test_y = toy_reviews(200, 1)
    vocab = CharVocab(train_t, min_count=1)
    train = (*encode_texts(train_t, vocab, 32), train_y)
    test = (*encode_texts(test_t, vocab, 32), test_y)
    torch.manual_seed(0)
    model = SelfAttentionClassifier(len(vocab), d_model=16, num_heads=2, max_len=32, dropout=0.0)
    hist = train_classifier(model, train, test, epochs=3, batch_size=32, lr=1e-2)
    first, last = hist["step_loss"][0], sum(hist["step_loss"][-5:]) / 5
    assert first > 0.6 and last < 0.1 * first                          # from about ln 2 to nearly 0
    assert hist["val_acc"][-1] > 0.95
    acc = float((predict(model, *test[:2]).argmax(1) == test_y).float().mean())
    assert acc == pytest.approx(hist["val_acc"][-1])
    out = capsys.readouterr()
    assert out.err == "" and out.out.count(" 轮 ") == 3 and "验证准确率" in out.out  # progress on stdout only


def test_char_vocab_and_encoding():
    vocab = CharVocab(["好好看", "好难看", "看"], min_count=2)
    assert vocab.itos == ["<pad>", "<unk>", "好", "看"]                 # 好 3, 看 3 (tie: by code point); 难 1
    assert vocab.encode("好吗看") == [2, UNK_ID, 3]
    ids, lengths = encode_texts(["好看看看", "", "看"], vocab, max_len=3)
    assert ids.tolist() == [[2, 3, 3], [PAD_ID] * 3, [3, PAD_ID, PAD_ID]]
    assert lengths.tolist() == [3, 0, 1]


def test_length_batches_cover_every_text_once_and_are_reproducible():
    lengths = torch.randint(1, 50, (103,), generator=torch.Generator().manual_seed(0))
    a = length_batches(lengths, 10, torch.Generator().manual_seed(1), pool=3)
    b = length_batches(lengths, 10, torch.Generator().manual_seed(1), pool=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b) == 11
    assert sorted(torch.cat(a).tolist()) == list(range(103))
    assert all(len(x) <= 10 for x in a)
    assert all((lengths[x].diff() >= 0).all() for x in a)              # sorted inside a batch


def test_char_ngrams():
    assert char_ngrams("好看吗") == ["好", "看", "吗", "好看", "看吗"]
    assert char_ngrams("好看吗", ns=(3,)) == ["好看吗"]
    assert char_ngrams("好", ns=(2,)) == []


def test_tfidf_features_fit_on_train_only_against_hand_computation():
    train = ["好好", "好看", "难看"]                                     # unigrams only, min_count 1
    vocab, (x_train, x_test) = tfidf_features(train, ["好难吗"], ns=(1,), min_count=1)
    assert sorted(vocab.itos) == ["好", "看", "难"]
    n = 3
    df = {"好": 2, "看": 2, "难": 1}
    idf = {w: math.log((1 + n) / (1 + d)) + 1 for w, d in df.items()}
    def expected(counts):
        v = torch.tensor([counts.get(w, 0) * idf[w] for w in vocab.itos], dtype=F64)
        return v / v.norm()
    torch.testing.assert_close(x_train.to_dense().double()[0], expected({"好": 2}))
    torch.testing.assert_close(x_train.to_dense().double()[1], expected({"好": 1, "看": 1}))
    torch.testing.assert_close(x_test.to_dense().double()[0], expected({"好": 1, "难": 1}))  # '吗' unseen: ignored


def test_logistic_regression_on_a_separable_toy_and_its_optimality():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g, dtype=F64)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    model = train_logistic_regression(x.float(), y, l2=1e-3)
    assert float((model(x.float()).argmax(1) == y).float().mean()) == 1.0
    # At the optimum the gradient of the regularised objective vanishes (checked in float64 by autograd).
    w = model.weight.detach().double().requires_grad_()
    b = model.bias.detach().double().requires_grad_()
    loss = F.cross_entropy(x @ w.T + b, y) + 0.5e-3 * w.pow(2).sum()
    gw, gb = torch.autograd.grad(loss, (w, b))
    assert gw.abs().max() < 1e-4 and gb.abs().max() < 1e-4
    # Sparse input gives the same logits as dense input.
    torch.testing.assert_close(model(x.float().to_sparse()), model(x.float()))
    with pytest.raises(ValueError, match=r"need x \(N, V\) and y \(N,\)"):
        train_logistic_regression(x.float(), y[:10])


def test_confusion_matrix_counts():
    y_true = torch.tensor([0, 0, 1, 1, 1, 0])
    y_pred = torch.tensor([0, 1, 1, 1, 0, 0])
    m = confusion_matrix(y_true, y_pred)
    assert m.tolist() == [[2, 1], [1, 2]]
    assert int(m.trace()) == int((y_true == y_pred).sum())
    with pytest.raises(ValueError, match="must be equal"):
        confusion_matrix(y_true, y_pred[:3])


def test_bad_ids_raise():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"T <= 32, got torch.int64 \(1, 40\)"):
        model(torch.ones(1, 40, dtype=torch.long))
    with pytest.raises(ValueError, match="ids must be int64"):
        model(torch.ones(1, 4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
def test_padding_invariance_on_cuda():
    model = tiny_model().cuda()
    ids = torch.tensor([[5, 7, 2]], device="cuda")
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long, device="cuda")], 1)
    torch.testing.assert_close(model(padded)[0], model(ids)[0], rtol=1e-5, atol=1e-5)

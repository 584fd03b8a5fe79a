"""attnbook.fasttext: FNV-1a against its published test vectors, n-grams against the paper's example,
subword vectors against an explicit mean of rows, and vectors for unseen words."""

import pytest
import torch

from attnbook.fasttext import FastText, char_ngrams, fnv1a_32, subword_table
from attnbook.word2vec import sgns_loss, train_word2vec


def test_fnv1a_32_reference_values():
    # Test vectors of the FNV specification (Fowler, Noll, Vo).
    assert fnv1a_32("") == 0x811C9DC5
    assert fnv1a_32("a") == 0xE40C292C
    assert fnv1a_32("foobar") == 0xBF9CF968


def test_char_ngrams_paper_example_and_chinese():
    # Bojanowski et al. (2017): "where", n = 3 -> <wh, whe, her, ere, re>
    assert char_ngrams("where", 3, 3) == ["<wh", "whe", "her", "ere", "re>"]
    assert char_ngrams("中国") == ["<中", "<中国", "中", "中国", "中国>", "国", "国>"]
    assert char_ngrams("a", 1, 3) == ["<a", "<a>", "a", "a>"]  # lone '<' and '>' are not n-grams
    with pytest.raises(ValueError, match="need 1 <= n_min <= n_max"):
        char_ngrams("x", 3, 2)
    with pytest.raises(ValueError, match="non-empty"):
        char_ngrams("")


def test_subword_table_rows_and_padding():
    vocab = {"中国": 0, "美国": 1}
    t = subword_table(["中国", "英国"], buckets=100, vocab=vocab)
    grams = char_ngrams("中国")
    assert t[0, 0] == 0 and t[0, 1:1 + len(grams)].tolist() == [2 + fnv1a_32(g) % 100 for g in grams]
    assert t.shape == (2, 1 + len(grams))
    # the unseen word has no row of its own: n-grams, then padding (V + buckets = 102)
    assert t[1].tolist() == [2 + fnv1a_32(g) % 100 for g in char_ngrams("英国")] + [102]


def test_word_vectors_are_means_of_their_rows():
    torch.manual_seed(0)
    m = FastText(["中国", "美国", "英国人"], dim=4, buckets=50)
    w = m.inputs.weight
    rows = [0] + [3 + fnv1a_32(g) % 50 for g in char_ngrams("中国")]
    torch.testing.assert_close(m.vectors()[0], w[rows].mean(0))
    unseen = [3 + fnv1a_32(g) % 50 for g in char_ngrams("英国")]
    torch.testing.assert_close(m.word_vectors(["英国"])[0], w[unseen].mean(0))
    # the forward pass is the SGNS loss of those vectors
    c, o, neg = torch.tensor([0]), torch.tensor([1]), torch.tensor([[2, 1]])
    torch.nn.init.normal_(m.context.weight)
    torch.testing.assert_close(m(c, o, neg), sgns_loss(w[rows].mean(0, keepdim=True), m.context.weight[o],
                                                       m.context.weight[neg]))


def test_an_unseen_word_lands_near_the_words_it_shares_characters_with():
    # Topic A: words built on 水 (water); topic B: words built on 火 (fire). 水库 is never seen in training.
    a, b = ["水流", "水面", "河水", "水位"], ["火焰", "火山", "烈火", "火力"]
    itos = a + b
    g = torch.Generator().manual_seed(0)
    sents = [torch.randint(0, 4, (6,), generator=g) + 4 * (s % 2) for s in range(300)]
    counts = torch.bincount(torch.cat(sents), minlength=8)
    torch.manual_seed(0)
    m = FastText(itos, dim=16, buckets=1000)
    hist = train_word2vec(m, sents, counts, epochs=6, window=2, negatives=3, batch_size=256, lr=0.05,
                          subsample=None, log=False)
    assert hist["loss"][-1] < hist["loss"][0]
    v = torch.nn.functional.normalize(m.word_vectors(["水库", "火车"]), dim=1)
    known = torch.nn.functional.normalize(m.vectors(), dim=1)
    sims = v @ known.T  # (2, 8)
    assert sims[0, :4].mean() > sims[0, 4:].mean() and sims[1, 4:].mean() > sims[1, :4].mean()

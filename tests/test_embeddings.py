"""attnbook.embeddings: vocabulary, one-hot, bag of words, TF-IDF, cosine, neighbours, analogies, PCA."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook.embeddings import (
    Vocab, WordVectors, analogy, analogy_accuracy, analogy_questions, bag_of_words, cosine_similarity, idf,
    nearest_neighbors, one_hot, pca, tfidf,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DOCS = [["猫", "吃", "鱼"], ["狗", "吃", "肉"], ["猫", "追", "狗", "猫"]]


def test_vocab_orders_by_count_then_word_and_applies_min_count():
    v = Vocab.from_sentences([["b", "a", "c"], ["a", "c", "d"], ["c"]], min_count=2)
    assert v.itos == ["c", "a"] and v.counts.tolist() == [3, 2]
    assert v.encode(["a", "zzz", "c"]).tolist() == [1, 0]  # unknown words dropped
    assert v.decode(torch.tensor([0, 1])) == ["c", "a"] and "a" in v and "b" not in v
    with pytest.raises(KeyError, match="'b' is not in the vocabulary"):
        v["b"]
    with pytest.raises(ValueError, match="min_count must be >= 1"):
        Vocab({}, min_count=0)


@pytest.mark.parametrize("device", DEVICES)
def test_one_hot_matches_torch_and_selects_rows(device):
    ids = torch.tensor([[3, 0], [1, 1]], device=device)
    assert torch.equal(one_hot(ids, 5), F.one_hot(ids, 5).float())
    w = torch.randn(5, 7, device=device)
    torch.testing.assert_close(one_hot(ids, 5) @ w, w[ids])  # (2, 2, 7): what nn.Embedding does
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\), got min 0, max 5"):
        one_hot(torch.tensor([0, 5], device=device), 5)
    with pytest.raises(ValueError, match="ids must be int64"):
        one_hot(torch.tensor([0.0]), 5)


def _toy_counts():
    v = Vocab.from_sentences(DOCS)
    return v, bag_of_words([v.encode(d) for d in DOCS], len(v))


def test_bag_of_words_counts_by_hand():
    v, counts = _toy_counts()
    assert counts.is_sparse and counts.shape == (3, 6)
    dense = counts.to_dense()
    assert dense[2, v["猫"]] == 2 and dense[2, v["追"]] == 1 and dense[0, v["肉"]] == 0
    assert dense.sum(1).tolist() == [3, 3, 4]
    with pytest.raises(ValueError, match=r"document 1 has ids outside \[0, 6\)"):
        bag_of_words([torch.tensor([0]), torch.tensor([6])], 6)


def test_tfidf_plain_hand_computed():
    v, counts = _toy_counts()
    t = tfidf(counts, smooth=False).to_dense()
    # document 3 = 猫 猫 追 狗; N = 3 documents; df: 猫 2, 追 1, 狗 2
    raw = {"猫": 2 * math.log(3 / 2), "追": 1 * math.log(3), "狗": 1 * math.log(3 / 2)}
    norm = math.sqrt(sum(x * x for x in raw.values()))
    for word, x in raw.items():
        assert t[2, v[word]].item() == pytest.approx(x / norm, rel=1e-6)
    assert t[2, v["吃"]] == 0
    # unnormalised, sublinear: (1 + ln 2) ln(3/2) for 猫 in document 3
    t2 = tfidf(counts, smooth=False, sublinear_tf=True, normalize=False).to_dense()
    assert t2[2, v["猫"]].item() == pytest.approx((1 + math.log(2)) * math.log(1.5), rel=1e-6)
    assert idf(torch.tensor([3, 1]), 3, smooth=False).tolist() == pytest.approx([0.0, math.log(3)])
    assert idf(torch.tensor([0]), 3).tolist() == pytest.approx([math.log(4) + 1])


@pytest.mark.parametrize("sublinear", [False, True])
def test_tfidf_matches_scikit_learn(sublinear):
    import sklearn.feature_extraction.text as sk
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    docs = [list(rng.choice(words, size=rng.integers(1, 30), p=np.arange(40, 0, -1) / 820)) for _ in range(60)]
    v = Vocab.from_sentences(docs)
    ours = tfidf(bag_of_words([v.encode(d) for d in docs], len(v)), sublinear_tf=sublinear).to_dense()
    ref = sk.TfidfVectorizer(analyzer=lambda d: d, vocabulary=v.stoi, sublinear_tf=sublinear).fit_transform(docs)
    torch.testing.assert_close(ours, torch.tensor(ref.toarray(), dtype=torch.float32), rtol=1e-5, atol=1e-6)


def test_tfidf_rejects_dense_input():
    with pytest.raises(ValueError, match="2-D sparse COO tensor"):
        tfidf(torch.ones(2, 3))


@pytest.mark.parametrize("device", DEVICES)
def test_cosine_similarity_matches_torch_and_zero_vector_gives_zero(device):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 6, generator=g).to(device), torch.randn(5, 6, generator=g).to(device)
    ref = F.cosine_similarity(a[:, None, :], b[None, :, :], dim=-1)  # (4, 5)
    torch.testing.assert_close(cosine_similarity(a, b), ref)
    z = cosine_similarity(torch.zeros(1, 6, device=device), b)
    assert torch.equal(z, torch.zeros(1, 5, device=device))
    with pytest.raises(ValueError, match=r"need a \(N, D\) and b \(M, D\), got \(4, 6\) and \(5, 3\)"):
        cosine_similarity(a, b[:, :3])


def test_nearest_neighbors_against_sorting_and_exclusion():
    g = torch.Generator().manual_seed(1)
    e = torch.randn(30, 8, generator=g, dtype=torch.float64)
    q = e[[2, 7]]
    sims, ids = nearest_neighbors(e, q, k=4, exclude=torch.tensor([[2], [7]]))
    en = e / e.norm(dim=1, keepdim=True)
    for row, query in enumerate([2, 7]):
        order = [j for j in torch.argsort(-(en @ en[query])).tolist() if j != query][:4]
        assert ids[row].tolist() == order
        torch.testing.assert_close(sims[row], (en[order] @ en[query]))
    with pytest.raises(ValueError, match=r"k must lie in \[1, 30\]"):
        nearest_neighbors(e, q, k=31)


def _royal_toy():
    """Axes: 0 person, 1 gender (+ female), 2 royalty, 3 fruit. Words placed so that the offset works."""
    words = ["man", "woman", "king", "queen", "apple", "pear", "prince", "lady"]
    e = torch.tensor([
        [1.0, -1.0, 0.0, 0.0],   # man
        [1.0, 1.0, 0.0, 0.0],    # woman
        [1.0, -1.0, 1.5, 0.0],   # king
        [1.0, 1.0, 1.5, 0.0],    # queen
        [0.0, 0.0, 0.0, 1.0],    # apple
        [0.0, 0.2, 0.0, 1.0],    # pear
        [1.0, -1.0, 1.2, 0.8],   # prince
        [1.0, 1.2, 0.0, 0.0],    # lady
    ])
    return Vocab({w: 100 - i for i, w in enumerate(words)}), e


def test_analogy_on_a_constructed_embedding():
    vocab, e = _royal_toy()
    wv = WordVectors(vocab, e)
    assert wv.analogy("man", "king", "woman")[0][0] == "queen"
    assert wv.analogy("king", "man", "queen")[0][0] == "woman"
    assert wv.analogy("man", "king", "woman", exclude_inputs=False)[0][0] == "queen"  # clean offset: no need
    # The baseline that ignores the offset answers with woman's nearest neighbour instead.
    _, ids = analogy(e, *(torch.tensor([vocab[w]]) for w in ("man", "king", "woman")), offset=False)
    assert vocab.itos[int(ids[0, 0])] == "lady" == wv.most_similar("woman", 1)[0][0]
    assert wv.rank("man", "king", "woman", "queen") == 1 and wv.rank("man", "king", "woman", "lady") == 2 \
        and wv.rank("man", "king", "woman", "prince") == 3


def test_analogy_without_excluding_inputs_returns_c_when_the_offset_is_small():
    # b - a is tiny next to c, as is common with real vectors: the raw nearest vector is c itself.
    vocab = Vocab({"a": 4, "b": 3, "c": 2, "d": 1})
    e = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.05, 1.0, 0.3]])
    wv = WordVectors(vocab, e)
    assert wv.analogy("a", "b", "c", exclude_inputs=False)[0][0] == "c"
    assert wv.analogy("a", "b", "c")[0][0] == "d"
    assert wv.rank("a", "b", "c", "d", exclude_inputs=False) == 2


def test_analogy_matches_numpy_brute_force():
    g = torch.Generator().manual_seed(3)
    e = torch.randn(50, 10, generator=g, dtype=torch.float64)
    a, b, c = torch.tensor([1, 5, 9]), torch.tensor([2, 6, 10]), torch.tensor([3, 7, 11])
    sims, ids = analogy(e, a, b, c, k=3)
    u = e.numpy() / np.linalg.norm(e.numpy(), axis=1, keepdims=True)
    for n in range(3):
        t = u[b[n]] - u[a[n]] + u[c[n]]
        cos = u @ t / np.linalg.norm(t)
        cos[[a[n], b[n], c[n]]] = -np.inf
        assert ids[n].tolist() == list(np.argsort(-cos)[:3])
        np.testing.assert_allclose(sims[n].numpy(), np.sort(cos)[::-1][:3], rtol=1e-12)
    with pytest.raises(ValueError, match="a, b, c must be 1-D of one length"):
        analogy(e, a, b[:2], c)


def test_analogy_questions_and_accuracy():
    vocab, e = _royal_toy()
    qs = analogy_questions([("man", "king"), ("woman", "queen"), ("girl", "princess")])
    assert len(qs) == 6 and ("man", "king", "woman", "queen") in qs
    r = analogy_accuracy(WordVectors(vocab, e), qs)
    assert (r["n_questions"], r["n_covered"]) == (6, 2)  # girl/princess are unknown
    assert r["correct"] == 2 and r["accuracy"] == 1.0 and r["accuracy_all"] == pytest.approx(2 / 6)


def test_word_vectors_similarity_and_neighbours():
    vocab, e = _royal_toy()
    wv = WordVectors(vocab, e)
    assert wv.similarity("apple", "pear") == pytest.approx(float(F.cosine_similarity(e[4], e[5], dim=0)))
    assert wv.most_similar("apple", 1)[0][0] == "pear"
    with pytest.raises(ValueError, match=r"weight must be \(8, D\)"):
        WordVectors(vocab, e[:3])


def test_pca_matches_covariance_eigendecomposition():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g, dtype=torch.float64) @ torch.diag(torch.tensor([5.0, 3, 1, 0.5, 0.1],
                                                                                         dtype=torch.float64))
    proj, comps, ratio = pca(x, 2)
    cov = torch.cov(x.T)
    evals, evecs = torch.linalg.eigh(cov)  # ascending
    top = evecs[:, [-1, -2]].T  # (2, 5)
    torch.testing.assert_close(comps.abs(), top.abs())
    torch.testing.assert_close(ratio, evals[[-1, -2]] / evals.sum())
    torch.testing.assert_close(proj, (x - x.mean(0)) @ comps.T)
    assert bool((comps.gather(1, comps.abs().argmax(1, keepdim=True)) > 0).all())
    import sklearn.decomposition as sk
    ref = sk.PCA(2).fit(x.numpy())
    np.testing.assert_allclose(np.abs(ref.transform(x.numpy())), proj.abs().numpy(), rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match=r"1 <= k <= min\(N, D\)"):
        pca(x, 6)

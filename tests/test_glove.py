"""attnbook.glove: co-occurrence counts vs a brute-force loop, the weighted least-squares loss vs its formula."""

import math

import pytest
import torch

from attnbook.glove import GloVe, cooccurrence_matrix, glove_loss, glove_weighting, train_glove

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("harmonic", [True, False])
def test_cooccurrence_matches_a_python_loop(harmonic):
    sents = [torch.tensor([0, 1, 2, 1, 3]), torch.tensor([3, 0]), torch.tensor([2])]
    x = cooccurrence_matrix(sents, 4, window=2, harmonic=harmonic).to_dense()
    ref = torch.zeros(4, 4)
    for s in sents:
        s = s.tolist()
        for i in range(len(s)):
            for j in range(len(s)):
                if i != j and abs(i - j) <= 2:
                    ref[s[i], s[j]] += 1 / abs(i - j) if harmonic else 1
    torch.testing.assert_close(x, ref)
    torch.testing.assert_close(x, x.T)
    # by hand: 1 and 1 are 2 apart once (positions 1 and 3) -> X[1, 1] = 2 * 1/2 with harmonic weights
    assert x[1, 1].item() == (1.0 if harmonic else 2.0)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 3\)"):
        cooccurrence_matrix(sents, 3)


def test_glove_weighting_values():
    x = torch.tensor([1.0, 50.0, 100.0, 400.0])
    expected = [0.01 ** 0.75, 0.5 ** 0.75, 1.0, 1.0]
    assert glove_weighting(x).tolist() == pytest.approx(expected, rel=1e-6)
    assert glove_weighting(torch.tensor([5.0]), x_max=10, alpha=1.0).item() == pytest.approx(0.5)


def test_glove_loss_against_the_formula():
    w = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    wt = torch.tensor([[2.0, 1.0], [1.0, -1.0]])
    b, bt = torch.tensor([0.1, -0.2]), torch.tensor([0.3, 0.0])
    x = torch.tensor([10.0, 200.0])
    e0 = 2.0 + 0.1 + 0.3 - math.log(10.0)
    e1 = 0.0 - 0.2 + 0.0 - math.log(200.0)
    terms = [(10 / 100) ** 0.75 * e0 ** 2, 1.0 * e1 ** 2]
    assert glove_loss(w, wt, b, bt, x, reduction="sum").item() == pytest.approx(sum(terms), rel=1e-6)
    assert glove_loss(w, wt, b, bt, x).item() == pytest.approx(sum(terms) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="every x must be > 0"):
        glove_loss(w, wt, b, bt, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"need w, w_tilde \(B, D\)"):
        glove_loss(w, wt[:1], b, bt, x)


@pytest.mark.parametrize("device", DEVICES)
def test_glove_module_uses_its_rows(device):
    torch.manual_seed(0)
    m = GloVe(6, 3).to(device)
    i, j, x = torch.tensor([0, 5], device=device), torch.tensor([2, 2], device=device), torch.tensor([3.0, 1.0], device=device)
    ref = glove_loss(m.w.weight[i], m.w_tilde.weight[j], m.b.weight[i, 0], m.b_tilde.weight[j, 0], x)
    torch.testing.assert_close(m(i, j, x), ref)
    torch.testing.assert_close(m.vectors(), m.w.weight + m.w_tilde.weight)


def test_training_fits_the_log_counts(capsys):
    g = torch.Generator().manual_seed(0)
    sents = [torch.randint(0, 4, (6,), generator=g) + 4 * (s % 2) for s in range(200)]
    x = cooccurrence_matrix(sents, 8, window=2)
    torch.manual_seed(0)
    m = GloVe(8, 4, x_max=10)
    hist = train_glove(m, x, epochs=40, batch_size=16, lr=0.1)
    assert hist["loss"][-1] < 0.2 * hist["loss"][0] and hist["entries"] == x._nnz()
    out = capsys.readouterr()
    assert "第 40/40 轮" in out.out and out.err == ""
    # Words of the two topics never co-occur: the fitted vectors separate them.
    v = torch.nn.functional.normalize(m.vectors(), dim=1)
    assert (v[:4] @ v[:4].T).mean() > (v[:4] @ v[4:].T).mean() + 0.5
    with pytest.raises(ValueError, match=r"cooc must be a sparse \(8, 8\) tensor"):
        train_glove(m, x.to_dense())

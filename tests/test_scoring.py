"""attnbook.scoring: hand-computed values, the paper formulas as einsums, torch references, masks, gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnbook.scoring import (
    AdditiveScore,
    MultiplicativeScore,
    additive_score,
    attend,
    cosine_score,
    dot_score,
    multiplicative_score,
    scaled_dot_score,
)

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def randn(*shape, seed=0, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64).to(device)


# Two queries and three keys, small enough to score by hand.
Q = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]], dtype=F64)             # (1, 2, 2)
K = torch.tensor([[[1.0, 1.0], [2.0, -1.0], [0.0, 0.0]]], dtype=F64)  # (1, 3, 2)


def test_dot_and_scaled_dot_by_hand():
    expected = torch.tensor([[[1.0, 2.0, 0.0], [2.0, -2.0, 0.0]]], dtype=F64)
    torch.testing.assert_close(dot_score(Q, K), expected, rtol=0, atol=0)
    torch.testing.assert_close(scaled_dot_score(Q, K), expected / math.sqrt(2), rtol=1e-15, atol=0)


def test_cosine_by_hand_and_against_torch():
    # q1 = (1, 0): cos with (1, 1) is 1/sqrt2, with (2, -1) is 2/sqrt5; the zero key scores 0, not nan.
    expected = torch.tensor([[[1 / math.sqrt(2), 2 / math.sqrt(5), 0.0],
                              [1 / math.sqrt(2), -1 / math.sqrt(5), 0.0]]], dtype=F64)
    torch.testing.assert_close(cosine_score(Q, K), expected, rtol=1e-15, atol=1e-15)
    q, k = randn(2, 3, 4, 5, seed=1), randn(2, 3, 6, 5, seed=2)
    ref = F.cosine_similarity(q.unsqueeze(-2), k.unsqueeze(-3), dim=-1)  # (2, 3, 4, 6)
    torch.testing.assert_close(cosine_score(q, k, scale=3.0), 3.0 * ref, rtol=1e-12, atol=1e-12)


def test_additive_and_multiplicative_by_hand():
    # A = 1: score = 2 tanh(q_0 + k_1);  W = [[1, 2], [0, 1]]: score = q0 k0 + 2 q0 k1 + q1 k1.
    w_q, w_k, v = torch.tensor([[1.0, 0.0]], dtype=F64), torch.tensor([[0.0, 1.0]], dtype=F64), \
        torch.tensor([2.0], dtype=F64)
    expected = 2 * torch.tanh(torch.tensor([[[2.0, 0.0, 1.0], [1.0, -1.0, 0.0]]], dtype=F64))
    torch.testing.assert_close(additive_score(Q, K, w_q, w_k, v), expected, rtol=1e-15, atol=1e-15)
    # with a bias b = 0.5 inside the tanh: 2 tanh(q_0 + k_1 + 0.5)
    expected_b = 2 * torch.tanh(torch.tensor([[[2.5, 0.5, 1.5], [1.5, -0.5, 0.5]]], dtype=F64))
    torch.testing.assert_close(additive_score(Q, K, w_q, w_k, v, torch.tensor([0.5], dtype=F64)), expected_b,
                               rtol=1e-15, atol=1e-15)
    w = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64)
    expected = torch.tensor([[[3.0, 0.0, 0.0], [2.0, -2.0, 0.0]]], dtype=F64)
    torch.testing.assert_close(multiplicative_score(Q, K, w), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_bahdanau_and_luong_formulas_as_einsum_with_different_sizes(device):
    q, k = randn(2, 3, 4, 7, seed=1, device=device), randn(2, 3, 5, 4, seed=2, device=device)  # Dq=7, Dk=4
    w_q, w_k, v = randn(6, 7, seed=3, device=device), randn(6, 4, seed=4, device=device), \
        randn(6, seed=5, device=device)
    # e_ij = v^T tanh(W_q q_i + W_k k_j), written pair by pair with einsum
    pre = torch.einsum("ad,bhid->bhia", w_q, q)[..., :, None, :] + \
        torch.einsum("ad,bhjd->bhja", w_k, k)[..., None, :, :]
    ref = torch.einsum("a,bhija->bhij", v, torch.tanh(pre))
    out = additive_score(q, k, w_q, w_k, v)
    assert out.device.type == device
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    b = randn(6, seed=7, device=device)
    ref_b = torch.einsum("a,bhija->bhij", v, torch.tanh(pre + b))
    torch.testing.assert_close(additive_score(q, k, w_q, w_k, v, b), ref_b, rtol=1e-12, atol=1e-12)
    w = randn(7, 4, seed=6, device=device)
    torch.testing.assert_close(multiplicative_score(q, k, w), torch.einsum("bhid,de,bhje->bhij", q, w, k),
                               rtol=1e-12, atol=1e-12)


def test_modules_compute_their_formula():
    torch.manual_seed(0)
    add, mul = AdditiveScore(5, 3, 8).double(), MultiplicativeScore(5, 3).double()
    q, k = randn(2, 4, 5, seed=1), randn(2, 6, 3, seed=2)
    torch.testing.assert_close(add(q, k), additive_score(q, k, add.w_q.weight, add.w_k.weight, add.v))
    torch.testing.assert_close(mul(q, k), q @ mul.weight @ k.transpose(-2, -1), rtol=1e-12, atol=1e-12)
    assert add(q, k).shape == (2, 4, 6)


def test_multiplicative_with_identity_is_dot_product():
    q, k = randn(3, 4, 5, seed=1), randn(3, 6, 5, seed=2)
    torch.testing.assert_close(multiplicative_score(q, k, torch.eye(5, dtype=F64)), dot_score(q, k),
                               rtol=1e-15, atol=1e-15)


# ---------------------------------------------------------------- attend


@pytest.mark.parametrize("device", DEVICES)
def test_attend_with_scaled_dot_equals_torch_sdpa(device):
    q, k, v = (randn(2, 3, 5, 8, seed=1, device=device), randn(2, 3, 7, 8, seed=2, device=device),
               randn(2, 3, 7, 4, seed=3, device=device))
    mask = torch.rand(2, 3, 5, 7, generator=torch.Generator().manual_seed(4)).to(device) > 0.3
    mask[..., 0] = True  # every query keeps a key (torch gives nan for an empty row)
    out, w = attend(q, k, v, scaled_dot_score, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    assert (w[~mask] == 0).all()


def test_attend_by_hand_is_a_weighted_average_of_values():
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]], dtype=F64)  # (1, 3, 2)
    out, w = attend(Q, K, v, dot_score)
    e = torch.exp(torch.tensor([1.0, 2.0, 0.0], dtype=F64))
    p = e / e.sum()
    torch.testing.assert_close(w[0, 0], p, rtol=1e-15, atol=0)
    torch.testing.assert_close(out[0, 0], p[0] * v[0, 0] + p[1] * v[0, 1] + p[2] * v[0, 2],
                               rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("score", [dot_score, cosine_score, MultiplicativeScore(4, 4).double(),
                                   AdditiveScore(4, 4, 3).double(), AdditiveScore(4, 4, 3, bias=True).double()],
                         ids=["dot", "cos", "mul", "add", "add_bias"])
def test_masked_keys_get_zero_weight_and_an_empty_row_gives_zeros(score):
    q, k, v = randn(2, 3, 4, seed=1), randn(2, 5, 4, seed=2), randn(2, 5, 6, seed=3)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 0] = False           # query (0, 0) may attend to nothing
    mask[1, :, 2:] = False       # batch 1: only keys 0, 1 exist (a padding mask)
    out, w = attend(q, k, v, score, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[0, 0] == 0).all() and (out[0, 0] == 0).all()
    assert (w[1, :, 2:] == 0).all()
    # Padding keys 2..4 away must be the same as the kept keys alone.
    out_short, _ = attend(q[1:], k[1:, :2], v[1:, :2], score)
    torch.testing.assert_close(out[1:], out_short, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bias", [False, True])
def test_additive_attention_gradient_reaches_every_parameter_and_input(bias):
    torch.manual_seed(0)
    score = AdditiveScore(6, 4, 5, bias=bias).double()
    q, k, v = randn(2, 3, 6, seed=1), randn(2, 7, 4, seed=2), randn(2, 7, 2, seed=3)
    for t in (q, k, v):
        t.requires_grad_(True)
    out, _ = attend(q, k, v, score)
    (out * randn(*out.shape, seed=4)).sum().backward()
    for name, p in list(score.named_parameters()) + [("q", q), ("k", k), ("v", v)]:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    # ... and it is the right gradient: float64 gradcheck through attend and the module's parameters.
    def f(q_, k_, v_, *p):
        return attend(q_, k_, v_, lambda a, b: additive_score(a, b, *p))[0]
    params = [p.detach().clone().requires_grad_() for p in (score.w_q.weight, score.w_k.weight, score.v, score.b)
              if p is not None]
    assert torch.autograd.gradcheck(f, (q, k, v, *params))


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match=r"q of shape \(1, 2, 3\) and k of shape \(1, 4, 5\) need the same"):
        dot_score(torch.randn(1, 2, 3), torch.randn(1, 4, 5))
    with pytest.raises(ValueError, match=r"different batch dimensions"):
        scaled_dot_score(torch.randn(2, 2, 3), torch.randn(3, 4, 3))
    with pytest.raises(ValueError, match=r"q must be a floating tensor of shape \(\.\.\., T, D\), got \(3,\)"):
        cosine_score(torch.randn(3), torch.randn(1, 3))
    with pytest.raises(ValueError, match=r"w of shape \(3, 3\) must be \(Dq=3, Dk=5\)"):
        multiplicative_score(torch.randn(1, 2, 3), torch.randn(1, 4, 5), torch.randn(3, 3))
    with pytest.raises(ValueError, match=r"\(A, Dq=3\), \(A, Dk=5\), \(A,\)"):
        additive_score(torch.randn(1, 2, 3), torch.randn(1, 4, 5), torch.randn(6, 3), torch.randn(6, 4),
                       torch.randn(6))
    with pytest.raises(ValueError, match=r"v of shape \(1, 3, 2\) must match k of shape \(1, 4, 3\)"):
        attend(torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 3, 2))
    with pytest.raises(ValueError, match=r"score_fn returned shape \(1, 4, 2\), expected \(1, 2, 4\)"):
        attend(torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 4, 2),
               lambda q, k: dot_score(k, q))
    with pytest.raises(ValueError, match="mask must be a torch.bool tensor"):
        attend(torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 4, 2), mask=torch.ones(1, 2, 4))


def test_multiplicative_key_term_is_the_gaussian_bayes_score():
    # q = M k_c + σ ε: log p(j | q) = (qᵀ M k_j - ½ ‖M k_j‖²) / σ² + const, reached with W = M/σ², U = -MᵀM/(2σ²)
    torch.manual_seed(0)
    m, sigma = torch.randn(5, 3, dtype=F64), 0.3
    q, k = torch.randn(2, 4, 5, dtype=F64), torch.randn(2, 6, 3, dtype=F64)
    score = MultiplicativeScore(5, 3, key_term=True).double()
    assert torch.equal(score.u, torch.zeros(3, 3, dtype=F64))       # starts as the plain bilinear score
    torch.testing.assert_close(score(q, k), multiplicative_score(q, k, score.weight))
    with torch.no_grad():
        score.weight.copy_(m / sigma**2)
        score.u.copy_(-m.T @ m / (2 * sigma**2))
    mk = torch.einsum("ij,btj->bti", m, k)
    bayes = (torch.einsum("bsi,bti->bst", q, mk) - 0.5 * (mk**2).sum(-1)[:, None, :]) / sigma**2
    torch.testing.assert_close(score(q, k), bayes)
    assert MultiplicativeScore(5, 3).u is None

"""Tests for attnbook.softmax, each against an independent reference."""

import itertools
import math

import entmax
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook.softmax import (
    cross_entropy,
    entmax15,
    entropy,
    log_softmax,
    logsumexp,
    masked_softmax,
    naive_softmax,
    softmax,
    softmax_jacobian,
    sparsemax,
    topk_softmax,
)

F64 = torch.float64
# (rtol, atol) for comparing a result in this dtype with a float64 reference.
TOL = {
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 8e-3),
    torch.float32: (1e-5, 1e-6),
    torch.float64: (1e-12, 1e-14),
}
# log_softmax values reach about -10 here, so allow rtol of a few ulp at that size.
LOG_TOL = {
    torch.float16: (2e-3, 4e-3),
    torch.bfloat16: (1.6e-2, 3e-2),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-12, 1e-12),
}
DTYPES = list(TOL)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def close(actual, expected, dtype, tol=TOL):
    rtol, atol = tol[dtype]
    torch.testing.assert_close(actual.to(F64), expected.to(F64), rtol=rtol, atol=atol)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- softmax family


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,dim", [((7,), -1), ((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), -1), ((2, 3, 1), -1)]
)
def test_softmax_log_softmax_match_torch(dtype, shape, dim, device):
    x = (3 * torch.randn(shape, generator=gen(), dtype=F64)).to(dtype).to(device)
    xd = x.to(F64)  # same values, reference computed in float64
    p, lp = softmax(x, dim), log_softmax(x, dim)
    assert p.dtype == lp.dtype == dtype and p.shape == x.shape and p.device == x.device
    close(p.cpu(), torch.softmax(xd, dim).cpu(), dtype)
    close(lp.cpu(), torch.log_softmax(xd, dim).cpu(), dtype, LOG_TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_computed_in_float32(dtype):
    # Computed in float32 and rounded once, the result is the float64 value
    # rounded to dtype (up to rare double-rounding ties); computing in dtype
    # itself is off by an ulp or more in about half the entries.
    x = (3 * torch.randn(8, 512, generator=gen(20), dtype=F64)).to(dtype)
    mask = torch.rand(8, 512, generator=gen(21)) > 0.2
    for ours, ref in [
        (softmax(x), torch.softmax(x.to(F64), -1)),
        (log_softmax(x), torch.log_softmax(x.to(F64), -1)),
        (logsumexp(x), torch.logsumexp(x.to(F64), -1)),
        (masked_softmax(x, mask), masked_reference(x, mask)),
    ]:
        assert ours.dtype == dtype
        assert (ours != ref.to(dtype)).float().mean() < 0.01


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0, 10])
def test_softmax_temperature(dtype, temperature):
    x = (3 * torch.randn(4, 6, generator=gen(1), dtype=F64)).to(dtype)
    close(softmax(x, temperature=temperature), torch.softmax(x.to(F64) / temperature, -1), dtype)


@pytest.mark.parametrize("temperature", [0, 0.0, -1, float("nan"), float("inf"), True, "1"])
def test_softmax_bad_temperature(temperature):
    with pytest.raises(ValueError, match="temperature"):
        softmax(torch.zeros(3), temperature=temperature)


KEEP3 = torch.ones(3, dtype=torch.bool)


@pytest.mark.parametrize(
    "fn",
    [naive_softmax, softmax, log_softmax, logsumexp, sparsemax, entmax15, entropy,
     lambda x: topk_softmax(x, 1), lambda x: masked_softmax(x, KEEP3), softmax_jacobian],
)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_non_float_input_rejected(fn, dtype):
    with pytest.raises(ValueError, match=str(dtype)):
        fn(torch.ones(3, dtype=dtype))


def test_bad_dim_and_empty_rejected():
    with pytest.raises(ValueError, match="dim=2"):
        softmax(torch.zeros(3, 4), dim=2)
    with pytest.raises(ValueError, match="empty"):
        softmax(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="0-d"):
        softmax(torch.tensor(1.0))


def test_naive_softmax_matches_on_moderate_input():
    x = torch.randn(3, 5, generator=gen(2), dtype=F64)
    torch.testing.assert_close(naive_softmax(x, 0), torch.softmax(x, 0))


E1 = math.exp(-1)


@pytest.mark.parametrize(
    "values,dtype,expected",
    [
        ([1e4, 1e4 - 1, 0], torch.float32, [1 / (1 + E1), E1 / (1 + E1), 0.0]),
        ([3e38, 0, -3e38], torch.float32, [1.0, 0.0, 0.0]),
        ([6e4, 6e4 - 32, 0], torch.float16, [1 / (1 + math.exp(-32)), math.exp(-32), 0.0]),
        ([32752.0, -32752.0], torch.float16, [1.0, 0.0]),  # +-finfo(float16).max / 2
        ([3e38, 3e38 - 2e36, -3e38], torch.bfloat16, [1.0, 0.0, 0.0]),
    ],
)
def test_extreme_inputs_stable_vs_naive(values, dtype, expected):
    x = torch.tensor(values, dtype=dtype)
    assert torch.isfinite(x).all()
    p = softmax(x)
    assert torch.isfinite(p).all()
    close(p, torch.tensor(expected, dtype=F64), dtype)
    sharpened = torch.tensor(expected, dtype=F64) ** 2 / sum(e * e for e in expected)  # softmax(2x)
    close(softmax(x, temperature=0.5), sharpened, dtype)
    close(logsumexp(x), torch.logsumexp(x.to(F64), -1), dtype)
    # The textbook formula overflows there: exp(max) = inf, inf / inf = nan.
    q = naive_softmax(x)
    assert q.dtype == dtype and torch.isnan(q).any()


def test_extreme_log_softmax():
    x = torch.tensor([1e4, 1e4 - 1, 0])
    lp = log_softmax(x)
    expected = torch.tensor([0.0, -1.0, -1e4], dtype=F64) - math.log1p(E1)
    torch.testing.assert_close(lp.to(F64), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False)])
def test_logsumexp_matches_torch(dtype, dim, keepdim):
    x = (5 * torch.randn(3, 4, 5, generator=gen(3), dtype=F64)).to(dtype)
    out = logsumexp(x, dim, keepdim)
    assert out.dtype == dtype
    close(out, torch.logsumexp(x.to(F64), dim, keepdim), dtype, LOG_TOL)


def test_logsumexp_infinities_match_torch():
    x = torch.tensor([[-math.inf, -math.inf], [math.inf, 0.0], [-math.inf, 1.0]])
    torch.testing.assert_close(logsumexp(x), torch.logsumexp(x, -1))


# ---------------------------------------------------------------- cross_entropy


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 5), (2, 3, 4), (5,)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(dtype, shape, reduction):
    x = (3 * torch.randn(shape, generator=gen(30), dtype=F64)).to(dtype)
    y = torch.randint(0, shape[-1], shape[:-1], generator=gen(31))
    ours = cross_entropy(x, y, reduction)
    # torch wants the class dimension second: (N, C, d1, ...) and (N, d1, ...).
    ref = F.cross_entropy(x.to(F64).movedim(-1, 1) if x.dim() > 1 else x.to(F64), y,
                          reduction=reduction)
    assert ours.dtype == dtype and ours.shape == ref.shape
    close(ours, ref, dtype, LOG_TOL)


def test_cross_entropy_gradient_is_p_minus_onehot():
    x = (4 * torch.randn(6, 5, generator=gen(32), dtype=F64)).requires_grad_(True)
    y = torch.randint(0, 5, (6,), generator=gen(33))
    cross_entropy(x, y, "sum").backward()
    expected = torch.softmax(x.detach(), -1) - F.one_hot(y, 5).to(F64)
    torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(lambda t: cross_entropy(t, y), (x.detach().requires_grad_(True),))


def test_cross_entropy_extreme_logits():
    # p_y = exp(-1e4) underflows: log(softmax) gives inf, the fused loss gives 1e4.
    x = torch.tensor([[1e4, 0.0], [0.0, 1e4]])
    y = torch.tensor([1, 1])
    torch.testing.assert_close(cross_entropy(x, y, "none"), torch.tensor([1e4, 0.0]))
    assert torch.isinf(-torch.log(torch.softmax(x, -1))[0, 1])


@pytest.mark.parametrize(
    "target,match",
    [(torch.tensor([0, 1, 2.0]), "int64"), (torch.tensor([0, 1], dtype=torch.int32), "int32"),
     ([0, 1, 2], "list"), (torch.tensor([0, 1]), r"\(2,\).*\(3, 4\)"),
     (torch.tensor([0, 4, 1]), r"\[0, 4\).*max 4"), (torch.tensor([-1, 0, 1]), "min -1")],
)
def test_cross_entropy_bad_target(target, match):
    with pytest.raises(ValueError, match=match):
        cross_entropy(torch.zeros(3, 4), target)
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(torch.zeros(3, 4), torch.zeros(3, dtype=torch.int64), "avg")


# ---------------------------------------------------------------- masked_softmax


def masked_reference(scores, mask, dim=-1):
    """torch.softmax over the kept entries of each slice, built by slicing."""
    s = scores.to(F64).movedim(dim, -1)
    m = mask.expand(scores.shape).movedim(dim, -1)
    out = torch.zeros_like(s)
    for idx in itertools.product(*map(range, s.shape[:-1])):
        keep = m[idx]
        if keep.any():
            out[idx][keep] = torch.softmax(s[idx][keep], -1)
    return out.movedim(-1, dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_masked_softmax_matches_sliced_reference(dim, device):
    scores = torch.randn(3, 4, 5, generator=gen(4), dtype=F64)
    mask = torch.rand(3, 4, 5, generator=gen(5)) > 0.4
    p = masked_softmax(scores.to(device), mask.to(device), dim).cpu()
    torch.testing.assert_close(p, masked_reference(scores, mask, dim))
    assert (p[~mask] == 0).all()


def test_masked_softmax_key_padding_broadcast():
    B, T = 3, 5
    scores = torch.randn(B, T, T, generator=gen(6), dtype=F64)
    lengths = torch.tensor([5, 3, 1])
    key_pad = (torch.arange(T) < lengths[:, None])[:, None, :]  # (B, 1, T)
    p = masked_softmax(scores, key_pad)
    assert p.shape == (B, T, T)
    torch.testing.assert_close(p, masked_reference(scores, key_pad))
    torch.testing.assert_close(p, masked_softmax(scores, key_pad.expand(B, T, T)))
    # Causal mask (T, T) against heads (B, H, T, T).
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    s4 = torch.randn(2, 2, T, T, generator=gen(7), dtype=F64)
    torch.testing.assert_close(masked_softmax(s4, causal), masked_reference(s4, causal))


@pytest.mark.parametrize("masked_value", [0.0, -math.inf, math.nan, 1e30])
def test_masked_softmax_fully_masked_row(masked_value):
    scores = torch.randn(3, 4, generator=gen(8), dtype=F64)
    mask = torch.rand(3, 4, generator=gen(9)) > 0.3
    mask[0] = True
    mask[1] = False  # nothing kept in row 1
    scores[~mask] = masked_value  # whatever hides behind the mask must not matter
    scores.requires_grad_(True)
    p = masked_softmax(scores, mask)
    assert torch.isfinite(p).all()
    assert (p[1] == 0).all() and (p[~mask] == 0).all()
    torch.testing.assert_close(p.detach(), masked_reference(scores.detach(), mask))
    upstream = torch.randn(3, 4, generator=gen(10), dtype=F64)
    (p * upstream).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[1] == 0).all() and (scores.grad[~mask] == 0).all()


def test_masked_softmax_bad_masks():
    scores = torch.randn(2, 3, 4)
    with pytest.raises(ValueError) as err:
        masked_softmax(scores, torch.ones(2, 5, dtype=torch.bool))
    assert "(2, 5)" in str(err.value) and "(2, 3, 4)" in str(err.value)
    with pytest.raises(ValueError) as err:  # broadcasts, but would grow scores
        masked_softmax(scores, torch.ones(5, 2, 3, 4, dtype=torch.bool))
    assert "(5, 2, 3, 4)" in str(err.value) and "(2, 3, 4)" in str(err.value)
    for bad in [torch.ones(2, 3, 4), torch.ones(2, 3, 4, dtype=torch.int64)]:
        with pytest.raises(ValueError, match="bool"):
            masked_softmax(scores, bad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masked_softmax_low_precision(dtype):
    scores = (4 * torch.randn(2, 4, 6, generator=gen(11), dtype=F64)).to(dtype)
    mask = torch.rand(2, 1, 6, generator=gen(12)) > 0.5
    mask[0, 0, 0] = True
    mask[1] = False
    p = masked_softmax(scores, mask)
    assert p.dtype == dtype and torch.isfinite(p).all()
    close(p, masked_reference(scores, mask), dtype)


# ---------------------------------------------------------------- top-k


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,dim", [(1, -1), (3, -1), (6, -1), (2, 0)])
def test_topk_softmax_matches_reference(dtype, k, dim):
    x = torch.randn(4, 6, generator=gen(13), dtype=F64).to(dtype)
    xd = x.to(F64)
    vals, idx = torch.topk(xd, k, dim)
    ref = torch.zeros_like(xd).scatter(dim, idx, torch.softmax(vals, dim))
    p = topk_softmax(x, k, dim)
    assert p.dtype == dtype
    close(p, ref, dtype)
    assert ((p > 0).sum(dim) == k).all()


@pytest.mark.parametrize("k", [0, -1, 7, 2.0, True])
def test_topk_softmax_bad_k(k):
    with pytest.raises(ValueError, match=f"k={k!r}.*6"):
        topk_softmax(torch.zeros(2, 6), k)


# ---------------------------------------------------------------- sparse maps


@pytest.mark.parametrize("ours,ref", [(sparsemax, entmax.sparsemax), (entmax15, entmax.entmax15)])
@pytest.mark.parametrize(
    "shape,dim", [((9,), 0), ((4, 7), 1), ((4, 7), 0), ((2, 3, 5), 1), ((2, 3, 5), 2)]
)
def test_sparse_maps_match_entmax_package(ours, ref, shape, dim):
    x = (2 * torch.randn(shape, generator=gen(14), dtype=F64)).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    p, q = ours(x, dim), ref(x_ref, dim)
    torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)
    assert (p >= 0).all() and (p == 0).any()  # scale 2 makes some entries exactly 0
    torch.testing.assert_close(p.sum(dim), torch.ones_like(p.sum(dim)))
    upstream = torch.randn(shape, generator=gen(15), dtype=F64)
    (p * upstream).sum().backward()
    (q * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("ours,ref", [(sparsemax, entmax.sparsemax), (entmax15, entmax.entmax15)])
def test_sparse_maps_low_precision(ours, ref, dtype):
    x = torch.randn(3, 8, generator=gen(16), dtype=F64).to(dtype)
    p = ours(x)
    assert p.dtype == dtype
    close(p, ref(x.to(F64), -1), dtype)


def test_sparsemax_clear_winner_is_one_hot():
    p = sparsemax(torch.tensor([0.1, 3.0, -2.0, 1.9]))
    assert torch.equal(p, torch.tensor([0.0, 1.0, 0.0, 0.0]))
    # 1.5-entmax: tau = z_max - 1 when one entry wins, so p = one-hot exactly.
    assert torch.equal(entmax15(torch.tensor([0.0, 5.0, 2.9])), torch.tensor([0.0, 1.0, 0.0]))


def test_sparsemax_uniform_and_closed_form():
    torch.testing.assert_close(sparsemax(torch.zeros(4)), torch.full((4,), 0.25))
    # Two close entries: tau = (a + b - 1) / 2, p = (a - tau, b - tau).
    p = sparsemax(torch.tensor([0.3, 0.0, -5.0], dtype=F64))
    torch.testing.assert_close(p, torch.tensor([0.65, 0.35, 0.0], dtype=F64))


# ---------------------------------------------------------------- calculus


def test_gradcheck():
    x = torch.randn(3, 5, generator=gen(17), dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: softmax(t, 0), (x,))
    assert torch.autograd.gradcheck(lambda t: softmax(t, -1, temperature=0.7), (x,))
    assert torch.autograd.gradcheck(lambda t: log_softmax(t, -1), (x,))
    assert torch.autograd.gradcheck(lambda t: logsumexp(t, 0), (x,))
    assert torch.autograd.gradcheck(lambda t: topk_softmax(t, 2), (x,))
    mask = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda t: masked_softmax(t, mask), (x,))
    p = (torch.rand(3, 5, generator=gen(18), dtype=F64) + 0.05).requires_grad_(True)
    assert torch.autograd.gradcheck(entropy, (p,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_jacobian_vs_autograd(dtype):
    z = torch.randn(2, 3, 6, generator=gen(19), dtype=F64)
    J = softmax_jacobian(softmax(z.to(dtype)))
    assert J.shape == (2, 3, 6, 6) and J.dtype == dtype
    for i, j in itertools.product(range(2), range(3)):
        ref = torch.autograd.functional.jacobian(lambda v: torch.softmax(v, -1), z[i, j])
        close(J[i, j], ref, dtype)


# ---------------------------------------------------------------- entropy


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_entropy_uniform_and_one_hot(n):
    uniform = torch.full((n,), 1 / n, dtype=F64)
    torch.testing.assert_close(entropy(uniform), torch.tensor(math.log(n), dtype=F64))
    one_hot = torch.zeros(n, dtype=F64)
    one_hot[n // 2] = 1
    one_hot.requires_grad_(True)
    h = entropy(one_hot)
    assert h.item() == 0.0
    h.backward()
    assert torch.isfinite(one_hot.grad).all()


def test_entropy_closed_form_and_zeros():
    p = [0.5, 0.25, 0.125, 0.125]
    expected = -sum(v * math.log(v) for v in p)  # = 1.75 log 2
    assert math.isclose(expected, 1.75 * math.log(2))
    t = torch.tensor([p, [0.5, 0.5, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(entropy(t), torch.tensor([expected, math.log(2)], dtype=F64))
    torch.testing.assert_close(entropy(t.T, dim=0), entropy(t))
    h16 = entropy(t.to(torch.float16))
    assert h16.dtype == torch.float16
    close(h16, torch.tensor([expected, math.log(2)]), torch.float16)


# ---------------------------------------------------------------- properties

vectors = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=20)
PROP = settings(max_examples=50, deadline=None)


@PROP
@given(vectors, st.floats(-1e3, 1e3))
def test_softmax_properties(values, c):
    x = torch.tensor(values, dtype=F64)
    p = softmax(x)
    assert (p >= 0).all()
    assert math.isclose(p.sum().item(), 1.0, rel_tol=1e-12)
    torch.testing.assert_close(p, torch.softmax(x, -1), rtol=1e-12, atol=1e-15)
    # Shift invariance: only the rounding of x + c (|x + c| <= 2e3) differs.
    torch.testing.assert_close(softmax(x + c), p, rtol=1e-11, atol=1e-14)
    # Order preservation: p_i / p_j = exp(x_i - x_j).
    gt = x[:, None] > x[None, :]
    assert (p[:, None] >= p[None, :])[gt].all()
    clear = gt & (x[:, None] - x[None, :] > 1e-9) & (p[None, :] > 1e-290)
    assert (p[:, None] > p[None, :])[clear].all()
    # log_softmax == log(softmax) wherever softmax is a normal, non-tiny number.
    ok = p > 1e-290
    torch.testing.assert_close(log_softmax(x)[ok], torch.log(p[ok]), rtol=1e-12, atol=1e-11)


@PROP
@given(vectors)
def test_sparse_maps_properties(values):
    x = torch.tensor(values, dtype=F64)
    for fn in (sparsemax, entmax15):
        p = fn(x)
        assert (p >= 0).all()
        assert math.isclose(p.sum().item(), 1.0, rel_tol=1e-10)
        assert p[x.argmax()] == p.max()


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


@pytest.mark.parametrize("dim", [-1, 0])
def test_each_slice_is_shifted_by_its_own_max(dim):
    # Rows 1e4 apart in float32: shifting by one global max (or adding it) underflows or rounds them away.
    x = torch.randn(3, 6, generator=gen(30)) + torch.tensor([[0.0], [1e4], [-1e4]])
    x = x if dim == -1 else x.T.contiguous()
    xd = x.to(F64)
    mask = torch.rand(x.shape, generator=gen(31)) > 0.3
    for ours, ref in [
        (softmax(x, dim), torch.softmax(xd, dim)),
        (log_softmax(x, dim), torch.log_softmax(xd, dim)),
        (logsumexp(x, dim), torch.logsumexp(xd, dim)),
        (cross_entropy(x if dim == -1 else x.T, torch.tensor([0, 1, 2]), "none"),
         F.cross_entropy(xd if dim == -1 else xd.T, torch.tensor([0, 1, 2]), reduction="none")),
        (masked_softmax(x, mask, dim), masked_reference(x, mask, dim)),
        (sparsemax(x, dim), entmax.sparsemax(xd, dim)),
        (entmax15(x, dim), entmax.entmax15(xd, dim)),
    ]:
        close(ours, ref, torch.float32)


def test_masked_softmax_large_kept_scores():
    # Kept scores near 1000 overflow exp unless shifted by the max of the kept entries.
    scores = 1000 + torch.randn(4, 5, generator=gen(32), dtype=F64)
    mask = torch.rand(4, 5, generator=gen(33)) > 0.4
    mask[:, 0] = True
    torch.testing.assert_close(masked_softmax(scores, mask), masked_reference(scores, mask))


@pytest.mark.parametrize("dim", [0, -1])
def test_naive_softmax_along_each_dim(dim):
    x = torch.randn(3, 5, generator=gen(34), dtype=F64)
    torch.testing.assert_close(naive_softmax(x, dim), torch.softmax(x, dim))


def test_softmax_jacobian_of_a_vector_and_in_half_precision():
    z = torch.randn(6, generator=gen(35), dtype=F64)
    ref = torch.autograd.functional.jacobian(lambda v: torch.softmax(v, -1), z)
    torch.testing.assert_close(softmax_jacobian(torch.softmax(z, -1)), ref)
    p16 = torch.softmax(z, -1).half()
    J16 = softmax_jacobian(p16)
    assert J16.dtype == torch.float16
    close(J16, softmax_jacobian(p16.to(F64)), torch.float16)


@pytest.mark.parametrize(
    "call,message",
    [(lambda t: softmax(t), "x has dtype"), (lambda t: cross_entropy(t, torch.zeros(3, dtype=torch.int64)),
                                             "logits has dtype"),
     (lambda t: masked_softmax(t, KEEP3), "scores has dtype"), (lambda t: entropy(t), "p has dtype"),
     (lambda t: softmax_jacobian(t), "p has dtype")],
)
def test_errors_name_the_argument(call, message):
    with pytest.raises(ValueError, match="^" + message):
        call(torch.ones(3, dtype=torch.int64))


def test_errors_name_the_type_received():
    with pytest.raises(ValueError, match="^x must be a torch.Tensor, got list"):
        softmax([1.0, 2.0])
    with pytest.raises(ValueError, match="got list"):
        masked_softmax(torch.zeros(3), [True, True, True])
    with pytest.raises(ValueError, match="got torch.float32"):
        masked_softmax(torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="dim=True"):
        softmax(torch.zeros(2, 3), dim=True)  # a bool is not a dimension, though bool is an int


def test_sparse_maps_keep_the_input_device():
    # The meta device stands in for CUDA here: a helper tensor made on the CPU would not mix with it.
    x = torch.randn(3, 5, device="meta")
    assert sparsemax(x).device.type == entmax15(x).device.type == "meta"


def test_masked_softmax_gradient_where_the_row_sum_is_exactly_one():
    # One kept entry (p = 1 whatever its score: gradient 0), or a runner-up exp(-200) below the rounding
    # of 1: the normaliser s is exactly 1 there and must still be differentiated through.
    x = torch.tensor([[0.3, 1.0, -2.0, 0.5], [0.0, -200.0, 0.1, 0.2]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[False, True, False, False], [True, True, False, False]])
    p = masked_softmax(x, mask)
    upstream = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 1.0]], dtype=F64)
    (grad,) = torch.autograd.grad((p * upstream).sum(), x)
    assert (grad[0] == 0).all()
    kept = x[1, :2]
    (ref,) = torch.autograd.grad((torch.softmax(kept, -1) * upstream[1, :2]).sum(), kept)
    torch.testing.assert_close(grad[1, :2], ref, rtol=1e-12, atol=1e-300)

"""Position encodings (attnbook.positional, attnbook.relative_position) against independent references:
the papers' formulas entry by entry with math.sin/cos, explicit rotation matrices, complex numbers,
hand-computed T5 buckets and ALiBi slopes, and torch's own scaled_dot_product_attention."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnbook
from attnbook.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    sinusoidal_encoding,
    sinusoidal_encoding_at,
    sinusoidal_encoding_loop,
    sinusoidal_shift_matrix,
)
from attnbook.relative_position import (
    ShawRelativeKeys,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    attention_with_bias,
    clipped_relative_index,
    relative_positions,
    shaw_scores,
    t5_relative_position_bucket,
    transformer_xl_score_terms,
)

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def paper_pe(max_len, d, base=10000.0):
    """Vaswani et al. (2017), sec. 3.5, one entry at a time: PE(pos, 2i) = sin(pos / base^(2i/d)), ..."""
    pe = [[0.0] * d for _ in range(max_len)]
    for pos in range(max_len):
        for i in range((d + 1) // 2):
            pe[pos][2 * i] = math.sin(pos / base ** (2 * i / d))
            if 2 * i + 1 < d:
                pe[pos][2 * i + 1] = math.cos(pos / base ** (2 * i / d))
    return torch.tensor(pe, dtype=F64).reshape(max_len, d)


# ---------------------------------------------------------------- sinusoidal


@pytest.mark.parametrize("max_len, d", [(7, 8), (50, 16), (5, 7), (4, 1), (1, 2), (0, 4), (30, 33)])
def test_sinusoidal_matches_the_paper_formula_entry_by_entry(max_len, d):
    torch.testing.assert_close(sinusoidal_encoding(max_len, d, dtype=F64), paper_pe(max_len, d),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(sinusoidal_encoding(max_len, d), paper_pe(max_len, d).float(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("max_len, d, base", [(20, 8, 10000.0), (9, 5, 10000.0), (12, 6, 100.0), (3, 1, 10.0)])
def test_loop_and_vectorised_versions_agree(max_len, d, base):
    loop = sinusoidal_encoding_loop(max_len, d, base)
    assert loop.dtype == torch.float32 and loop.shape == (max_len, d)
    torch.testing.assert_close(sinusoidal_encoding(max_len, d, base), loop, rtol=0, atol=1e-6)
    torch.testing.assert_close(loop.double(), paper_pe(max_len, d, base), rtol=0, atol=1e-7)


def test_odd_d_model_ends_in_a_sine_and_the_common_numpy_recipe_breaks():
    pe = sinusoidal_encoding(10, 7, dtype=F64)
    pos = torch.arange(10, dtype=F64)
    torch.testing.assert_close(pe[:, 6], torch.sin(pos / 10000 ** (6 / 7)), rtol=0, atol=1e-14)
    # The widespread recipe (seed 000 sec. 2.2.5) writes d/2 rounded up columns into d/2 rounded down.
    table = np.zeros((10, 7))
    div = np.exp(np.arange(0, 7, 2) * -(np.log(10000.0) / 7))
    table[:, 0::2] = np.sin(np.arange(10)[:, None] * div)
    with pytest.raises(ValueError, match="could not broadcast"):
        table[:, 1::2] = np.cos(np.arange(10)[:, None] * div)


def test_encoding_at_real_and_negative_positions():
    p = torch.tensor([-3.0, 0.5, 2.25], dtype=F64)
    pe = sinusoidal_encoding_at(p, 6)
    for r, pos in enumerate(p.tolist()):
        for j in range(6):
            angle = pos / 10000 ** (2 * (j // 2) / 6)
            assert pe[r, j].item() == pytest.approx(math.sin(angle) if j % 2 == 0 else math.cos(angle), abs=1e-14)
    # integer positions give float32; the encoding of -p is (-sin, cos)
    neg, posi = sinusoidal_encoding_at(torch.tensor([-5]), 4), sinusoidal_encoding_at(torch.tensor([5]), 4)
    assert neg.dtype == torch.float32
    torch.testing.assert_close(neg, posi * torch.tensor([-1.0, 1.0, -1.0, 1.0]))


def test_bounded_and_every_position_distinct():
    pe = sinusoidal_encoding(2048, 64, dtype=F64)
    assert pe.abs().max() <= 1.0
    dist = torch.cdist(pe, pe)  # (2048, 2048)
    dist.fill_diagonal_(float("inf"))
    assert dist.min() > 0.1  # no two positions share (or nearly share) an encoding
    # each pair (sin, cos) lies on the unit circle, so |PE(pos)|^2 = d/2
    torch.testing.assert_close((pe**2).sum(-1), torch.full((2048,), 32.0, dtype=F64))


@pytest.mark.parametrize("d", [2, 8, 64])
@pytest.mark.parametrize("k", [1, 5, -3, 40, 0.5])
def test_shift_is_one_rotation_matrix_for_every_position(d, k):
    M = sinusoidal_shift_matrix(k, d)
    pos = torch.arange(0, 200, 7, dtype=F64)
    torch.testing.assert_close(sinusoidal_encoding_at(pos, d) @ M.T, sinusoidal_encoding_at(pos + k, d),
                               rtol=0, atol=1e-10)
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=F64), rtol=0, atol=1e-12)  # a rotation
    torch.testing.assert_close(M @ sinusoidal_shift_matrix(2.0, d), sinusoidal_shift_matrix(k + 2.0, d))
    # block diagonal: nothing outside the 2x2 blocks
    blocks = torch.block_diag(*[torch.ones(2, 2, dtype=F64)] * (d // 2))
    assert (M * (1 - blocks)).abs().max() == 0


def test_shift_matrix_rejects_odd_d_model():
    with pytest.raises(ValueError, match="d_model=7 is odd"):
        sinusoidal_shift_matrix(1, 7)


def test_dot_product_depends_only_on_the_offset():
    d, base = 32, 10000.0
    pe = sinusoidal_encoding(100, d, dtype=F64)
    gram = pe @ pe.T  # (100, 100)
    w = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=F64)
    offsets = torch.arange(100, dtype=F64)
    closed = torch.cos(offsets[:, None] * w).sum(-1)  # sum_i cos(w_i (p - q))
    p, q = torch.meshgrid(torch.arange(100), torch.arange(100), indexing="ij")
    torch.testing.assert_close(gram, closed[(p - q).abs()], rtol=0, atol=1e-10)


@pytest.mark.parametrize("bad", [dict(max_len=-1, d_model=4), dict(max_len=3, d_model=0),
                                 dict(max_len=3, d_model=4, base=1.0), dict(max_len=2.5, d_model=4)])
def test_sinusoidal_bad_arguments(bad):
    with pytest.raises(ValueError, match="must be"):
        sinusoidal_encoding(**bad)


def test_sinusoidal_module_adds_the_table_for_any_length():
    m = SinusoidalPositionalEncoding(6)
    x = torch.randn(2, 300, 6, generator=gen())
    torch.testing.assert_close(m(x), x + paper_pe(300, 6).float(), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match=r"\(2, 3, 5\) must be \(\.\.\., T, 6\)"):
        m(torch.zeros(2, 3, 5))


# ---------------------------------------------------------------- learned


def test_learned_embedding_adds_its_rows_and_trains_only_used_rows():
    torch.manual_seed(0)
    m = LearnedPositionalEmbedding(max_len=8, d_model=3)
    x = torch.randn(2, 5, 3, generator=gen())
    y = m(x)
    torch.testing.assert_close(y, x + m.weight.detach()[:5])
    y.sum().backward()
    torch.testing.assert_close(m.weight.grad[:5], torch.full((5, 3), 2.0))  # batch of 2
    assert m.weight.grad[5:].abs().max() == 0  # positions never seen get no gradient


def test_learned_embedding_raises_beyond_its_table():
    m = LearnedPositionalEmbedding(max_len=8, d_model=3)
    m(torch.zeros(1, 8, 3))  # the longest allowed
    with pytest.raises(ValueError, match=r"T=9 exceeds max_len=8.*positions 8\.\.8"):
        m(torch.zeros(1, 9, 3))
    with pytest.raises(ValueError, match="must be"):
        LearnedPositionalEmbedding(max_len=0, d_model=3)


# ---------------------------------------------------------------- rotary


def rotation_matrix(m, d, base=10000.0):
    """Su et al., eq. (15): block diagonal, block i = [[cos m t_i, -sin m t_i], [sin m t_i, cos m t_i]]."""
    R = torch.zeros(d, d, dtype=F64)
    for i in range(d // 2):
        t = m * base ** (-2 * i / d)
        R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = math.cos(t), -math.sin(t)
        R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = math.sin(t), math.cos(t)
    return R


def test_rotary_equals_the_papers_rotation_matrix():
    x = torch.randn(3, 9, 8, dtype=F64, generator=gen())  # (B, T, D)
    y = apply_rotary(x)
    expected = torch.stack([torch.stack([rotation_matrix(m, 8) @ x[b, m] for m in range(9)])
                            for b in range(3)])
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-12)


def test_rotary_equals_complex_multiplication_and_rotate_half_layout():
    x = torch.randn(2, 4, 6, 16, dtype=F64, generator=gen(1))  # (B, H, T, D)
    pos = torch.arange(6, dtype=F64)
    w = 10000.0 ** (-torch.arange(0, 16, 2, dtype=F64) / 16)
    # Meta's Llama: pairs as complex numbers times e^{i m w}
    z = torch.view_as_complex(x.reshape(2, 4, 6, 8, 2).contiguous()) * torch.polar(torch.ones(6, 8, dtype=F64),
                                                                                     pos[:, None] * w)
    torch.testing.assert_close(apply_rotary(x), torch.view_as_real(z).reshape(x.shape), rtol=0, atol=1e-12)
    # Hugging Face's rotate_half: same rotation once features (2i, 2i+1) are moved to (i, i + D/2)
    perm = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])
    xh = x[..., perm]
    cos = torch.cos(pos[:, None] * w).repeat(1, 2)
    sin = torch.sin(pos[:, None] * w).repeat(1, 2)
    rotate_half = torch.cat([-xh[..., 8:], xh[..., :8]], -1)
    yh = xh * cos + rotate_half * sin
    torch.testing.assert_close(apply_rotary(x)[..., perm], yh, rtol=0, atol=1e-12)


def test_rotary_preserves_norms_and_scores_depend_only_on_the_offset():
    q = torch.randn(5, 32, dtype=F64, generator=gen(2))
    k = torch.randn(5, 32, dtype=F64, generator=gen(3))
    for m in (0, 3, 1000):
        torch.testing.assert_close(apply_rotary(q, torch.full((5,), float(m))).norm(dim=-1), q.norm(dim=-1))

    def score(m, n):  # <rot(q, m), rot(k, n)> for each of the 5 (q, k) pairs
        return (apply_rotary(q, torch.full((5,), float(m))) * apply_rotary(k, torch.full((5,), float(n)))).sum(-1)

    for m, n in [(0, 0), (7, 3), (3, 7), (100, 95)]:
        for shift in (1, 50, 12345):
            torch.testing.assert_close(score(m + shift, n + shift), score(m, n), rtol=0, atol=1e-9)
        # closed form: q^T R_m^T R_n k = q^T R_{n-m} k
        expected = torch.einsum("bd,de,be->b", q, rotation_matrix(n - m, 32), k)
        torch.testing.assert_close(score(m, n), expected, rtol=0, atol=1e-10)


def test_rotary_explicit_positions_batch_and_dtypes():
    x = torch.randn(2, 5, 4, generator=gen(4))
    pos = torch.tensor([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]])
    y = apply_rotary(x, pos)
    torch.testing.assert_close(y[0], apply_rotary(x[0]))
    torch.testing.assert_close(y[1], apply_rotary(x[1], torch.arange(10, 15)))
    ref = apply_rotary(x.double())
    for dtype, tol in [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)]:
        low = apply_rotary(x.to(dtype))
        assert low.dtype == dtype
        torch.testing.assert_close(low.double(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_rotary_device_follows_the_input(device):
    x = torch.randn(2, 3, 7, 8, generator=gen(5)).to(device)
    y = apply_rotary(x)
    assert y.device.type == device
    torch.testing.assert_close(y.cpu(), apply_rotary(x.cpu()), rtol=1e-5, atol=1e-6)


def test_rotary_bad_input():
    with pytest.raises(ValueError, match=r"even feature size D.*\(2, 3, 5\)"):
        apply_rotary(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"positions of shape \(4,\) must end in T=3"):
        apply_rotary(torch.zeros(2, 3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="floating tensor"):
        apply_rotary(torch.zeros(3, 4, dtype=torch.long))


# ---------------------------------------------------------------- permutation equivariance


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = attnbook.SelfAttention(8).double()
    x = torch.randn(4, 8, dtype=F64, generator=gen(6))
    perm = torch.tensor([3, 1, 2, 0])
    out, _ = layer(x)
    out_p, _ = layer(x[perm])
    torch.testing.assert_close(out_p, out[perm])  # the same vectors, permuted: equivariant, not invariant
    pe = sinusoidal_encoding(4, 8, dtype=F64)
    with_pos, _ = layer(x + pe)
    with_pos_p, _ = layer(x[perm] + pe)
    assert (with_pos_p - with_pos[perm]).abs().max() > 1e-3  # positions break the tie


# ---------------------------------------------------------------- Shaw et al.


def test_clipped_relative_index_by_hand():
    idx = clipped_relative_index(4, 5, max_distance=2)
    expected = torch.tensor([[2, 3, 4, 4, 4],   # j - i = 0, 1, 2, 3 -> 2, 4 -> 2
                             [1, 2, 3, 4, 4],
                             [0, 1, 2, 3, 4],
                             [0, 0, 1, 2, 3]])  # j - i = -3 -> -2
    torch.testing.assert_close(idx, expected)
    torch.testing.assert_close(relative_positions(2, 3), torch.tensor([[0, 1, 2], [-1, 0, 1]]))


def test_shaw_scores_match_the_papers_equation_entry_by_entry():
    torch.manual_seed(0)
    table = ShawRelativeKeys(max_distance=2, head_dim=4).double()
    q = torch.randn(2, 3, 5, 4, dtype=F64, generator=gen(7))  # (B, H, Tq, D)
    k = torch.randn(2, 3, 6, 4, dtype=F64, generator=gen(8))
    e = shaw_scores(q, k, table(5, 6))
    w = table.weight.detach()
    for i in range(5):
        for j in range(6):
            a = w[max(-2, min(2, j - i)) + 2]  # w^K_{clip(j - i, 2)}
            ref = (q[..., i, :] * (k[..., j, :] + a)).sum(-1) / math.sqrt(4)
            torch.testing.assert_close(e[..., i, j], ref, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="rel_keys of shape"):
        shaw_scores(q, k, table(6, 6))


# ---------------------------------------------------------------- Transformer-XL


def test_transformer_xl_terms_match_the_papers_decomposition():
    g = gen(9)
    T, d, dh = 5, 8, 6
    E = torch.randn(T, d, dtype=F64, generator=g)  # token embeddings E_x
    Wq, WkE, WkR = (torch.randn(dh, d, dtype=F64, generator=g) for _ in range(3))
    u, v = torch.randn(dh, dtype=F64, generator=g), torch.randn(dh, dtype=F64, generator=g)
    R = {n: torch.tensor([math.sin(n / 10000 ** (2 * (c // 2) / d)) if c % 2 == 0 else
                          math.cos(n / 10000 ** (2 * (c // 2) / d)) for c in range(d)], dtype=F64)
         for n in range(-T, T)}  # sinusoid R_{i-j}
    q, k = E @ Wq.T, E @ WkE.T
    r = torch.stack([torch.stack([WkR @ R[i - j] for j in range(T)]) for i in range(T)])  # (T, T, dh)
    a, b, c, dd = transformer_xl_score_terms(q, k, r, u, v)
    for i in range(T):
        for j in range(T):
            assert a[i, j].item() == pytest.approx((E[i] @ Wq.T @ WkE @ E[j]).item(), abs=1e-10)
            assert b[i, j].item() == pytest.approx((E[i] @ Wq.T @ WkR @ R[i - j]).item(), abs=1e-10)
            assert c[i, j].item() == pytest.approx((u @ WkE @ E[j]).item(), abs=1e-10)
            assert dd[i, j].item() == pytest.approx((v @ WkR @ R[i - j]).item(), abs=1e-10)
    total = ((q + u) @ k.T) + torch.einsum("id,ijd->ij", q + v, r)
    torch.testing.assert_close(a + b + c + dd, total)
    # per-head u, v of shape (H, 1, D) broadcast over a (B, H, T, D) batch
    qh, kh = q.expand(2, 3, T, dh), k.expand(2, 3, T, dh)
    uh, vh = u.expand(3, 1, dh), v.expand(3, 1, dh)
    for got, want in zip(transformer_xl_score_terms(qh, kh, r, uh, vh), (a, b, c, dd)):
        torch.testing.assert_close(got, want.expand(2, 3, T, T))


# ---------------------------------------------------------------- T5


def test_t5_buckets_bidirectional_by_hand():
    # 32 buckets, max_distance 128: 16 per direction; exact below 8; then 8 + floor(2 log2(n / 8)), max 15.
    # Boundaries n = 8 * 2^(b/2): 8 -> 8, 11.3 -> 9, 16 -> 10, 22.6 -> 11, 32 -> 12, 45.3 -> 13, 64 -> 14, 90.5 -> 15
    n = [0, 1, 7, 8, 11, 12, 15, 16, 22, 23, 31, 32, 45, 46, 63, 64, 90, 91, 127, 128, 1000]
    b = [0, 1, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 15, 15]
    rel = torch.tensor(n)
    # key before the query (j - i = -n): lower half; key after (j - i = +n, n > 0): upper half (+16)
    assert t5_relative_position_bucket(-rel).tolist() == b
    assert t5_relative_position_bucket(rel).tolist() == [0] + [x + 16 for x in b[1:]]


def test_t5_buckets_causal_by_hand():
    # 32 buckets all for the past: exact below 16; then 16 + floor(16 log(n/16) / log 8), max 31
    n = [0, 1, 15, 16, 18, 19, 20, 21, 22, 32, 64, 127, 128, 500]
    b = [0, 1, 15, 16, 16, 17, 17, 18, 18, 21, 26, 31, 31, 31]
    # e.g. n = 19: 16 log(19/16) / log 8 = 1.32 -> 17;  n = 21: 2.09 -> 18;  n = 32: 16 log 2 / log 8 = 5.33 -> 21
    assert t5_relative_position_bucket(-torch.tensor(n), bidirectional=False).tolist() == b
    assert t5_relative_position_bucket(torch.tensor([1, 5, 300]), bidirectional=False).tolist() == [0, 0, 0]


def test_t5_small_configuration_by_hand():
    # 8 buckets, max_distance 8, causal: exact for n < 4; bucket 4 + floor(4 log2(n/4)), capped at 7
    n = torch.arange(0, 12)
    expected = [0, 1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7]  # n=5: 4+floor(1.29), n=6: 4+floor(2.34), n=7: 4+floor(3.23)
    assert t5_relative_position_bucket(-n, False, 8, 8).tolist() == expected


def test_t5_bias_module_looks_up_its_table():
    torch.manual_seed(0)
    m = T5RelativeBias(num_heads=3, bidirectional=True, num_buckets=8, max_distance=16)
    bias = m(4, 6)  # (H, 4, 6)
    for i in range(4):
        for j in range(6):
            bucket = t5_relative_position_bucket(torch.tensor(j - i), True, 8, 16)
            torch.testing.assert_close(bias[:, i, j], m.bias.weight[bucket])
    with pytest.raises(ValueError, match="max_distance must be an integer > 2"):
        T5RelativeBias(2, True, 8, 2)
    with pytest.raises(ValueError, match="integer tensor"):
        t5_relative_position_bucket(torch.tensor([1.0]))


# ---------------------------------------------------------------- ALiBi


def reference_slopes(n):
    """The recipe of Press et al.'s reference code, written out independently."""
    def geometric(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return geometric(n)
    p = 2 ** math.floor(math.log2(n))
    return geometric(p) + reference_slopes(2 * p)[0::2][: n - p]


def test_alibi_slopes_power_of_two():
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    assert alibi_slopes(1).tolist() == [1 / 256]
    torch.testing.assert_close(alibi_slopes(16), torch.tensor([2 ** (-h / 2) for h in range(1, 17)], dtype=F64))


def test_alibi_slopes_non_power_of_two():
    # 6 heads: the 4-head slopes, then every other 8-head slope (1/2, 1/8)
    assert alibi_slopes(6).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    # 12 heads: the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16-head sequence
    expected = [2.0 ** -h for h in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected, dtype=F64))
    for n in (1, 2, 3, 5, 6, 7, 12, 20, 24, 40, 64, 96):
        torch.testing.assert_close(alibi_slopes(n), torch.tensor(reference_slopes(n), dtype=F64))
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)


def test_alibi_bias_values_and_the_reference_codes_causal_shortcut():
    bias = alibi_bias(4, 5, 5, dtype=F64)  # (H, T, T)
    m = alibi_slopes(4)
    for h in range(4):
        for i in range(5):
            for j in range(5):
                assert bias[h, i, j].item() == -m[h].item() * abs(i - j)
    # The reference code adds m * j instead of -m (i - j): identical weights under a causal mask,
    # because each row only shifts by the constant m * i (softmax is shift-invariant).
    scores = torch.randn(4, 5, 5, dtype=F64, generator=gen(10))
    causal = attnbook.causal_mask(5)
    ours = attnbook.masked_softmax(scores + bias, causal)
    shortcut = attnbook.masked_softmax(scores + m.view(4, 1, 1) * torch.arange(5, dtype=F64), causal)
    torch.testing.assert_close(ours, shortcut)


# ---------------------------------------------------------------- attention with an additive bias


@pytest.mark.parametrize("device", DEVICES)
def test_attention_with_bias_matches_torch_sdpa_with_a_float_mask(device):
    g = gen(11)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=F64, generator=g).to(device) for _ in range(3))
    bias = torch.randn(3, 5, 5, dtype=F64, generator=g).to(device)
    out, w = attention_with_bias(q, k, v, bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5, dtype=F64, device=device))
    # with a boolean causal mask: torch takes bias with -inf where masked
    causal = attnbook.causal_mask(5, device)
    out, w = attention_with_bias(q, k, v, bias, causal)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~causal, float("-inf")))
    torch.testing.assert_close(out, ref)
    assert w[..., ~causal].abs().max() == 0
    # zero bias: plain attention
    torch.testing.assert_close(attention_with_bias(q, k, v, torch.zeros(5, 5, dtype=F64, device=device))[0],
                               attnbook.scaled_dot_product_attention(q, k, v)[0])


def test_attention_with_bias_fully_masked_row_is_zero_and_bad_bias_raises():
    q = k = v = torch.randn(1, 3, 4, dtype=F64, generator=gen(12))
    mask = torch.tensor([[False, False, False], [True, True, False], [True, True, True]])
    out, w = attention_with_bias(q, k, v, torch.zeros(3, 3, dtype=F64), mask)
    assert w[0, 0].abs().max() == 0 and out[0, 0].abs().max() == 0 and torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"bias of shape \(4, 4\) does not broadcast"):
        attention_with_bias(q, k, v, torch.zeros(4, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"bias of shape \(3, 2\) does not broadcast"):
        attention_with_bias(q, k, v, torch.zeros(3, 2, dtype=F64))


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


@pytest.mark.parametrize("call, message", [
    (lambda: attnbook.sinusoidal_frequencies(0), "^d_model must be an integer >= 1, got 0"),
    (lambda: sinusoidal_encoding(-1, 4), "^max_len must be an integer >= 0"),
    (lambda: sinusoidal_encoding_loop(-1, 4), "^max_len must be an integer >= 0"),
    (lambda: sinusoidal_encoding_loop(2, 0), "^d_model must be an integer >= 1"),
    (lambda: sinusoidal_shift_matrix(1, 0), "^d_model must be an integer >= 2"),
    (lambda: sinusoidal_shift_matrix(1, 5), r"so no linear map sends PE\(pos\) to PE\(pos \+ k\)$"),
    (lambda: SinusoidalPositionalEncoding(0), "^d_model must be an integer >= 1"),
    (lambda: LearnedPositionalEmbedding(0, 4), "^max_len must be an integer >= 1"),
    (lambda: LearnedPositionalEmbedding(4, 0), "^d_model must be an integer >= 1"),
    (lambda: LearnedPositionalEmbedding(4, 3)(torch.zeros(3)), r"^x of shape \(3,\) must be \(\.\.\., T, 3\)"),
    (lambda: sinusoidal_encoding_at([0, 1], 4), "^positions must be a torch.Tensor, got list"),
    (lambda: attnbook.sinusoidal_frequencies(4, True), "^base must be a finite number > 1"),
    (lambda: attnbook.sinusoidal_frequencies(4, "10"), "^base must be a finite number > 1"),
    (lambda: apply_rotary([[0.0, 1.0]]), "got list"),
    (lambda: apply_rotary(torch.zeros(2, 4, dtype=torch.int64)), r"got \(2, 4\)"),
    (lambda: apply_rotary(torch.zeros(2, 4), [0, 1]), "^positions of shape list"),
    (lambda: apply_rotary(torch.zeros(2, 4), torch.tensor(1)), r"^positions of shape \(\) must end in T=2"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_smallest_valid_sizes_and_bases():
    assert LearnedPositionalEmbedding(1, 1)(torch.zeros(1, 1)).shape == (1, 1)
    assert SinusoidalPositionalEncoding(1)(torch.zeros(3, 1)).shape == (3, 1)
    assert sinusoidal_encoding_loop(0, 1).shape == (0, 1)
    # Any base > 1: w_i = base^(-2i/d) in closed form, and the shift matrix for that base.
    torch.testing.assert_close(attnbook.sinusoidal_frequencies(4, 1.5), torch.tensor([1.0, 1.5 ** -0.5], dtype=F64))
    M = sinusoidal_shift_matrix(3, 6, base=100.0)
    pe = sinusoidal_encoding(10, 6, base=100.0, dtype=F64)
    torch.testing.assert_close(pe[:-3] @ M.T, pe[3:])


def test_defaults_are_base_10000_in_every_form():
    torch.testing.assert_close(attnbook.sinusoidal_frequencies(6), 10000.0 ** -(torch.arange(0, 6, 2, dtype=F64) / 6))
    torch.testing.assert_close(sinusoidal_encoding_loop(200, 5), sinusoidal_encoding(200, 5))  # pos * w grows
    assert sinusoidal_shift_matrix(1, 4, dtype=torch.float32).dtype == torch.float32


def test_modules_accept_2d_inputs_and_use_their_base_and_dtype():
    x = torch.randn(5, 6, dtype=F64)
    out = SinusoidalPositionalEncoding(6, base=100.0)(x)
    assert torch.equal(out, x + sinusoidal_encoding(5, 6, base=100.0, dtype=F64))
    learned = LearnedPositionalEmbedding(8, 6).double()
    assert torch.equal(learned(x), x + learned.weight[:5])


def test_learned_table_starts_small():
    torch.manual_seed(6)
    w = LearnedPositionalEmbedding(512, 64).weight.detach()
    assert 0.95 < float(w.std()) / 0.02 < 1.05  # init_std 0.02 (GPT-2); 32,768 draws spread by 0.4 %


def test_encoding_at_batched_positions_equals_each_row():
    positions = torch.tensor([[0.0, 1.5, 7.0], [3.0, -2.0, 100.0]], dtype=F64)
    pe = sinusoidal_encoding_at(positions, 6)
    assert pe.shape == (2, 3, 6)
    for row in range(2):
        torch.testing.assert_close(pe[row], sinusoidal_encoding_at(positions[row], 6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rotary_computes_in_its_documented_precision(dtype):
    # Angles in float64; the rotation itself in x's dtype (float32 for half precision), rounded once.
    x = torch.randn(3, 16, 32, generator=gen(40)).to(dtype)
    work = torch.float32 if dtype != torch.float32 else dtype
    angle = torch.arange(16, dtype=F64)[:, None] * attnbook.sinusoidal_frequencies(32)
    cos, sin = torch.cos(angle).to(work), torch.sin(angle).to(work)
    x0, x1 = x.to(work)[..., 0::2], x.to(work)[..., 1::2]
    ref = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2).to(dtype)
    assert torch.equal(apply_rotary(x), ref)


def test_positional_functions_build_on_the_requested_device():
    # meta stands in for CUDA: a helper tensor made on the CPU would not mix with it.
    x = torch.zeros(2, 5, 8, device="meta")
    assert apply_rotary(x).device.type == apply_rotary(x, torch.arange(5)).device.type == "meta"
    assert sinusoidal_encoding_at(torch.arange(5, device="meta"), 8).device.type == "meta"
    assert sinusoidal_encoding(5, 8, device="meta").device.type == "meta"
    assert attnbook.sinusoidal_frequencies(8, device="meta").device.type == "meta"
    assert sinusoidal_shift_matrix(1, 8, device="meta").device.type == "meta"
    assert SinusoidalPositionalEncoding(8)(x).device.type == "meta"


@pytest.mark.parametrize("call, message", [
    (lambda: relative_positions(-1), "^tq must be an integer >= 0"),
    (lambda: relative_positions(2, -1), "^tk must be an integer >= 0"),
    (lambda: clipped_relative_index(2, 3, -1), "^max_distance must be an integer >= 0"),
    (lambda: alibi_slopes(0), "^num_heads must be an integer >= 1"),
    (lambda: ShawRelativeKeys(-1, 4), "^max_distance must be an integer >= 0"),
    (lambda: ShawRelativeKeys(2, 0), "^head_dim must be an integer >= 1"),
    (lambda: T5RelativeBias(0), "^num_heads must be an integer >= 1"),
    (lambda: t5_relative_position_bucket(torch.zeros(2, dtype=torch.long), True, 3),
     "^num_buckets must be an integer >= 4"),
    (lambda: t5_relative_position_bucket(torch.zeros(2, dtype=torch.long), False, 1),
     "^num_buckets must be an integer >= 2"),
    (lambda: t5_relative_position_bucket(torch.zeros(2), True), "got torch.float32$"),
    (lambda: t5_relative_position_bucket([0, 1], True), "got list$"),
    (lambda: attention_with_bias(torch.zeros(4, 8), torch.zeros(6, 5), torch.zeros(6, 3), torch.zeros(4, 6)),
     r"^q \(4, 8\), k \(6, 5\), v \(6, 3\): need q, k with the same D and k, v with the same Tk$"),
    (lambda: attention_with_bias(torch.zeros(4, 8), torch.zeros(6, 8), torch.zeros(6, 3), torch.zeros(4, 5)),
     r"^bias of shape \(4, 5\) does not broadcast to scores \(\.\.\., 4, 6\)$"),
    (lambda: shaw_scores(torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(3, 4, 4)),
     r"\(Tq, Tk, D\) = \(3, 5, 4\), got \(3, 4, 4\)$"),
    (lambda: transformer_xl_score_terms(torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(3, 4, 4),
                                        torch.zeros(4), torch.zeros(4)),
     r"^q \(2, 3, 4\), k \(2, 5, 4\) need r of shape \(Tq, Tk, D\) = \(3, 5, 4\), got \(3, 4, 4\)$"),
])
def test_relative_position_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_relative_positions_edge_sizes_and_defaults():
    assert torch.equal(relative_positions(3), relative_positions(3, 3))
    assert relative_positions(0, 2).shape == (0, 2) and relative_positions(2, 0).shape == (2, 0)
    assert torch.equal(clipped_relative_index(2, 3, 0), torch.zeros(2, 3, dtype=torch.long))
    shaw = ShawRelativeKeys(0, 1)  # K = 0: one shared vector; the smallest head
    assert shaw.weight.shape == (1, 1) and ShawRelativeKeys(3, 4).weight.shape == (7, 4)
    bucket = t5_relative_position_bucket(torch.arange(-3, 4), False, 2, 4)  # smallest causal table
    assert int(bucket.max()) < 2
    assert t5_relative_position_bucket(torch.arange(-3, 4), True, 4, 4).max() < 4
    t5 = T5RelativeBias(1)
    assert (t5.bidirectional, t5.num_buckets, t5.max_distance) == (True, 32, 128)
    torch.manual_seed(7)
    w = ShawRelativeKeys(500, 64).weight.detach()
    assert 0.95 < float(w.std()) / 0.02 < 1.05  # 64,064 draws spread by 0.3 %


def test_alibi_bias_rectangular_and_in_the_requested_dtype():
    bias = alibi_bias(4, 3, 5, dtype=torch.float32)
    assert bias.shape == (4, 3, 5) and bias.dtype == torch.float32
    ref = -alibi_slopes(4).view(4, 1, 1) * relative_positions(3, 5).abs()
    torch.testing.assert_close(bias, ref.float())


def test_scale_is_used_and_3d_inputs_work():
    g = gen(41)
    q, k, v = torch.randn(2, 3, 4, generator=g, dtype=F64), torch.randn(2, 5, 4, generator=g, dtype=F64), \
        torch.randn(2, 5, 2, generator=g, dtype=F64)
    rel = torch.randn(3, 5, 4, generator=g, dtype=F64)
    out, w = attention_with_bias(q, k, v, torch.zeros(3, 5, dtype=F64), scale=0.3)  # not 1/sqrt(4)
    ref, ref_w = attnbook.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, ref)
    expected = (q @ k.transpose(-2, -1) + torch.einsum("bid,ijd->bij", q, rel)) * 0.3
    torch.testing.assert_close(shaw_scores(q, k, rel, scale=0.3), expected)
    torch.testing.assert_close(shaw_scores(q[0], k[0], rel, scale=0.3), expected[0])  # 2-D q, k


@pytest.mark.parametrize("u_shape", [(4,), (1, 4)])
def test_transformer_xl_terms_with_unbatched_and_batched_queries(u_shape):
    g = gen(42)
    q, k = torch.randn(2, 3, 4, generator=g, dtype=F64), torch.randn(2, 5, 4, generator=g, dtype=F64)
    r = torch.randn(3, 5, 4, generator=g, dtype=F64)
    u, v = torch.randn(u_shape, generator=g, dtype=F64), torch.randn(u_shape, generator=g, dtype=F64)
    for qq, kk in [(q, k), (q[0], k[0])]:
        a, b, c, d = transformer_xl_score_terms(qq, kk, r, u, v)
        uu, vv = u.reshape(4), v.reshape(4)
        for term, ref in [(a, qq @ kk.transpose(-2, -1)), (b, torch.einsum("...id,ijd->...ij", qq, r)),
                          (c, (kk @ uu).unsqueeze(-2).expand_as(a)), (d, (r @ vv).expand_as(a))]:
            assert term.shape == qq.shape[:-1] + (5,)
            torch.testing.assert_close(term, ref)


def test_relative_position_builds_on_the_requested_device():
    assert relative_positions(3, 4, device="meta").device.type == "meta"  # meta stands in for CUDA
    assert clipped_relative_index(3, 4, 2, device="meta").device.type == "meta"
    assert alibi_bias(2, 3, 4, device="meta").device.type == "meta"
    assert ShawRelativeKeys(2, 4).to("meta")(3, 4).device.type == "meta"
    assert T5RelativeBias(2).to("meta")(3, 4).device.type == "meta"

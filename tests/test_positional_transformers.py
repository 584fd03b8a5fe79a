"""T5 buckets, RoPE and ALiBi against the Hugging Face ``transformers`` implementations that real models run:
T5Attention._relative_position_bucket / compute_bias, Llama's rotary embedding + rotate_half, GPT-J's
rotate_every_two, and BLOOM's build_alibi_tensor. transformers is a requirement (MiniLM pulls it):
missing is a failure, not a skip."""

import pytest
import torch
from transformers import LlamaConfig, T5Config
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply_rotary
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply_rotary
from transformers.models.t5.modeling_t5 import T5Attention

import attnbook
from attnbook import alibi_bias, alibi_slopes, apply_rotary, t5_relative_position_bucket

F64 = torch.float64

# ---------------------------------------------------------------- T5 relative position buckets

# (18, 128) and (38, 16): a float64 log would move a few bidirectional buckets; T5 rounds in float32.
T5_CONFIGS = [(32, 128), (8, 16), (16, 32), (64, 256), (32, 20), (10, 24), (33, 100), (6, 7), (18, 128), (38, 16)]


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", T5_CONFIGS)
def test_t5_buckets_equal_transformers_for_every_distance(bidirectional, num_buckets, max_distance):
    # Both sides use j - i (memory - query); exact integer equality, log boundaries included.
    rel = torch.arange(-3 * max_distance - 5, 3 * max_distance + 6)
    ref = T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_distance <= max_exact:
        # transformers divides by log(max_distance / max_exact) <= 0: buckets fall with distance and turn
        # negative ((38, 16) causal: distance 20 -> 14, 23 -> -2). attnbook refuses such a configuration.
        assert int(ref.min()) < 0
        with pytest.raises(ValueError, match=f"max_distance must be an integer > {max_exact}"):
            t5_relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
        return
    ours = t5_relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, ref.long())
    # a (Tq, Tk) grid as the models build it, with tq != tk
    grid = attnbook.relative_positions(9, 40)
    assert torch.equal(t5_relative_position_bucket(grid, bidirectional, num_buckets, max_distance),
                       T5Attention._relative_position_bucket(grid, bidirectional, num_buckets, max_distance))


@pytest.mark.parametrize("is_decoder", [False, True])
def test_t5_bias_module_equals_t5_attention_compute_bias(is_decoder):
    # Encoder: bidirectional buckets; decoder: causal. Same (num_buckets, H) table copied into both.
    torch.manual_seed(0)
    cfg = T5Config(d_model=16, d_kv=4, num_heads=3, relative_attention_num_buckets=12,
                   relative_attention_max_distance=40, is_decoder=is_decoder)
    hf = T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0)
    ours = attnbook.T5RelativeBias(3, bidirectional=not is_decoder, num_buckets=12, max_distance=40)
    with torch.no_grad():
        ours.bias.weight.copy_(torch.randn(12, 3))
        hf.relative_attention_bias.weight.copy_(ours.bias.weight)
        for tq, tk in [(5, 5), (4, 70), (70, 3)]:
            assert torch.equal(ours(tq, tk), hf.compute_bias(tq, tk)[0])  # (H, tq, tk)


# ---------------------------------------------------------------- RoPE

# attnbook rotates adjacent pairs (2i, 2i+1); Llama's rotate_half rotates (i, i + D/2). Moving feature 2i to
# slot i and 2i+1 to slot i + D/2 maps one layout onto the other: rope_half(x[perm]) = rope_pairs(x)[perm].


def halves_permutation(d):
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def rope_tolerance(x, positions):
    # The references form pos * w_i in float32 (w_i itself rounded): the angle error grows like pos * eps32.
    return 1e-6 + 1e-7 * float(positions.max()) * float(x.abs().max())


ROPE_CASES = [(8, 10000.0), (16, 10000.0), (64, 10000.0), (128, 500000.0), (32, 100.0)]


@pytest.mark.parametrize("d, base", ROPE_CASES)
def test_rotary_equals_llama_rotate_half_with_the_features_permuted(d, base):
    B, H, T = 2, 3, 7
    g = torch.Generator().manual_seed(d)
    q = torch.randn(B, H, T, d, generator=g)
    k = torch.randn(B, H, T, d, generator=g)
    rotary = LlamaRotaryEmbedding(LlamaConfig(hidden_size=H * d, num_attention_heads=H, rope_theta=base))
    perm = halves_permutation(d)
    for pos in (None,  # attnbook's default positions 0 .. T-1
                torch.tensor([[3, 4, 5, 6, 7, 8, 9], [0, 5, 17, 100, 101, 300, 999]])):  # per-sequence ids
        ours_q = apply_rotary(q, None if pos is None else pos[:, None, :], base)  # positions broadcast over heads
        ours_k = apply_rotary(k, None if pos is None else pos[:, None, :], base)
        pos = torch.arange(T).expand(B, T) if pos is None else pos
        cos, sin = rotary(q, pos)  # (B, T, D) each
        q_hf, k_hf = llama_apply_rotary(q[..., perm], k[..., perm], cos, sin)  # (B, H, T, D)
        tol = rope_tolerance(q, pos)
        torch.testing.assert_close(ours_q[..., perm], q_hf, rtol=0, atol=tol)
        torch.testing.assert_close(ours_k[..., perm], k_hf, rtol=0, atol=tol)
        # the attention scores do not depend on the layout at all: q·k is invariant under perm
        torch.testing.assert_close(ours_q @ ours_k.transpose(-2, -1), q_hf @ k_hf.transpose(-2, -1),
                                   rtol=0, atol=20 * tol * d ** 0.5)


@pytest.mark.parametrize("d", [8, 16, 64])
def test_rotary_equals_gptj_rotate_every_two_without_permutation(d):
    # GPT-J keeps the paper's interleaved pairs, so no permutation; base 10000 is fixed there.
    B, T, H = 2, 6, 3
    x = torch.randn(B, T, H, d, generator=torch.Generator().manual_seed(d))  # GPT-J's (B, T, H, D)
    table = create_sinusoidal_positions(1024, d)  # (1024, D): [sin | cos] of pos * w_i
    pos = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 30, 31, 200, 513, 1000]])
    sin, cos = torch.split(table[pos], d // 2, dim=-1)  # (B, T, D/2) each
    ref = gptj_apply_rotary(x, sin, cos)  # (B, T, H, D)
    ours = apply_rotary(x.transpose(1, 2), pos[:, None, :]).transpose(1, 2)  # via (B, H, T, D)
    torch.testing.assert_close(ours, ref, rtol=0, atol=rope_tolerance(x, pos))


# ---------------------------------------------------------------- ALiBi

HEADS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 64, 96]


@pytest.mark.parametrize("num_heads", HEADS)
def test_alibi_slopes_and_bias_equal_bloom(num_heads):
    # BLOOM adds m_h * j (key position j) instead of -m_h |i - j|; BLOOM computes in float32.
    T = 9
    bloom = build_alibi_tensor(torch.ones(1, T, dtype=torch.long), num_heads, torch.float32)  # (H, 1, T)
    bloom = bloom[:, 0].double()  # (H, T): m_h * j
    m = alibi_slopes(num_heads)  # (H,) float64
    # slopes: BLOOM's value at key 1 is m_h (powers of two and the paper's interpolated sequence alike)
    torch.testing.assert_close(bloom[:, 1], m, rtol=1e-5, atol=0)
    # bias: -m |i - j| = -|m j - m i|, built from BLOOM's tensor entry by entry
    ref = -(bloom[:, None, :] - bloom[:, :, None]).abs()  # (H, T, T)
    torch.testing.assert_close(alibi_bias(num_heads, T, T, dtype=F64), ref, rtol=1e-5, atol=0)
    # and BLOOM's shortcut gives the same causal attention weights (each row shifted by m_h * i)
    scores = torch.randn(num_heads, T, T, dtype=F64, generator=torch.Generator().manual_seed(num_heads))
    causal = attnbook.causal_mask(T)
    torch.testing.assert_close(attnbook.masked_softmax(scores + alibi_bias(num_heads, T, T, dtype=F64), causal),
                               attnbook.masked_softmax(scores + bloom[:, None, :], causal), rtol=1e-5, atol=1e-7)


def test_alibi_with_left_padding_equals_bloom_on_the_real_tokens():
    # BLOOM counts positions over real tokens only (cumsum of the mask), so a left-padded row's bias
    # over its real tokens is that of the unpadded, shorter sequence.
    H, T = 6, 8
    mask = torch.tensor([[1] * T, [0, 0, 0] + [1] * (T - 3)])
    bloom = build_alibi_tensor(mask, H, torch.float32).view(2, H, T).double()  # (B, H, T)
    for b, pad in ((0, 0), (1, 3)):
        real = bloom[b][:, pad:]  # (H, T - pad)
        ref = -(real[:, None, :] - real[:, :, None]).abs()
        torch.testing.assert_close(alibi_bias(H, T - pad, T - pad, dtype=F64), ref, rtol=1e-5, atol=0)

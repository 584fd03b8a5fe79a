"""Grouped-query / multi-query attention (num_kv_heads) against torch SDPA's enable_gqa; rotary positions;
the cached path; DecoderLayer without cross-attention against torch's pre-LN encoder layer with a causal mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook import (DecoderLayer, GroupedQueryAttention, KVCache, MultiHeadAttention, Transformer, apply_rotary,
                      causal_mask)
from attnbook.gpt import kv_cache_bytes
from attnbook.multihead import repeat_kv

F64 = torch.float64
D, H = 16, 4


def mha(num_kv_heads, rope_base=None, seed=0, d=D, h=H):
    torch.manual_seed(seed)
    return GroupedQueryAttention(d, h, num_kv_heads=num_kv_heads, rope_base=rope_base).double().eval()


def x_of(b=2, t=7, d=D, seed=1):
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


def sdpa_reference(m, x, mask, rotate=False):
    """The same projections, attention by torch SDPA with enable_gqa (torch's own head grouping)."""
    b, t, _ = x.shape
    q = m.w_q(x).view(b, t, m.num_heads, m.d_head).transpose(1, 2)             # (B, H, T, Dh)
    k = m.w_k(x).view(b, t, m.num_kv_heads, m.d_head).transpose(1, 2)          # (B, Hkv, T, Dh)
    v = m.w_v(x).view(b, t, m.num_kv_heads, m.d_head).transpose(1, 2)
    if rotate:
        q, k = apply_rotary(q, base=m.rope_base), apply_rotary(k, base=m.rope_base)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)   # mask: True = attend
    return m.w_o(out.transpose(1, 2).reshape(b, t, -1))


@pytest.mark.parametrize("kv", [1, 2, 4])
@pytest.mark.parametrize("rope", [None, 10000.0])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_equals_torch_sdpa_enable_gqa(kv, rope, causal):
    m, x = mha(kv, rope), x_of()
    mask = causal_mask(7) if causal else None
    with torch.no_grad():
        out, w = m(x, x, x, mask)
        ref = sdpa_reference(m, x, mask, rotate=rope is not None)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert w.shape == (2, H, 7, 7)


def test_query_head_i_reads_key_value_head_i_over_group_size():
    x = torch.arange(2 * 3 * 5 * 4, dtype=F64).reshape(2, 3, 5, 4)     # (B, Hkv=3, T, Dh)
    y = repeat_kv(x, 2)                                                   # (B, 6, T, Dh)
    for i in range(6):
        assert torch.equal(y[:, i], x[:, i // 2])
    assert repeat_kv(x, 1) is x


def test_kv_projections_shrink_with_the_kv_heads():
    for kv in (1, 2, 4):
        m = mha(kv)
        assert m.w_k.weight.shape == m.w_v.weight.shape == (kv * D // H, D)
        assert m.w_q.weight.shape == m.w_o.weight.shape == (D, D)
    n = {kv: sum(p.numel() for p in mha(kv).parameters()) for kv in (1, 2, 4)}
    assert n[4] - n[1] == 2 * (D * (D - D // H) + (D - D // H))          # fewer K, V weights and biases


def test_default_is_plain_multi_head_attention_with_the_same_checkpoint():
    old = MultiHeadAttention(D, H)
    new = GroupedQueryAttention(D, H, num_kv_heads=H)
    assert {k: v.shape for k, v in old.state_dict().items()} == {k: v.shape for k, v in new.state_dict().items()}
    new.load_state_dict(old.state_dict())
    x = x_of().float()
    torch.testing.assert_close(new(x, x, x)[0], old(x, x, x)[0], rtol=0, atol=0)
    assert new.num_kv_heads == H and new.rope_base is None and "num_kv_heads" not in repr(new)
    assert repr(new).replace("GroupedQueryAttention", "MultiHeadAttention") == repr(old)
    torch.manual_seed(5)
    seeded_old = MultiHeadAttention(D, H).state_dict()
    torch.manual_seed(5)                                    # the same draws: a seeded model does not move
    for k, v in GroupedQueryAttention(D, H).state_dict().items():
        torch.testing.assert_close(v, seeded_old[k], rtol=0, atol=0)


@pytest.mark.parametrize("kv", [1, 2, 4])
@pytest.mark.parametrize("rope", [None, 10000.0])
def test_cached_steps_equal_the_causal_forward(kv, rope):
    m, x = mha(kv, rope), x_of(t=9)
    with torch.no_grad():
        full, full_w = m(x, x, x, causal_mask(9))
        cache = KVCache()
        prefill, _ = m.attend_cached(x[:, :4], cache)                     # a chunk, causal inside
        steps = [m.attend_cached(x[:, t:t + 1], cache) for t in range(4, 9)]
    torch.testing.assert_close(prefill, full[:, :4], rtol=1e-12, atol=1e-12)
    for t, (out, w) in zip(range(4, 9), steps):
        torch.testing.assert_close(out, full[:, t:t + 1], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(w, full_w[:, :, t:t + 1, :t + 1], rtol=1e-12, atol=1e-12)
    assert cache.keys.shape == (2, kv, 9, D // H)                          # the cache keeps Hkv heads only
    assert cache.nbytes() == kv_cache_bytes(1, 2, 9, kv, D // H, 8)


@pytest.mark.parametrize("kwargs, words", [
    (dict(num_kv_heads=3), "num_kv_heads=3 must be a positive integer dividing num_heads=4"),
    (dict(num_kv_heads=0), "num_kv_heads=0"),
    (dict(num_kv_heads=8), "num_kv_heads=8"),
    (dict(num_kv_heads=2.0), "num_kv_heads=2.0"),
    (dict(rope_base=1.0), "rope_base"),
])
def test_bad_arguments_raise_value_errors(kwargs, words):
    with pytest.raises(ValueError, match=words):
        GroupedQueryAttention(D, H, **kwargs)
    with pytest.raises(ValueError, match="d_head=3 must be even"):
        GroupedQueryAttention(12, 4, rope_base=10000.0)
    with pytest.raises(ValueError, match=r"x of shape \(2, 3, 5\)"):
        mha(2).attend_cached(torch.zeros(2, 3, 5, dtype=F64), KVCache())


# --- DecoderLayer without cross-attention -------------------------------------------------------------------

def test_decoder_layer_without_cross_attention_is_the_decoder_layer_minus_sublayer_2():
    full = {k: v.shape for k, v in DecoderLayer(D, H, 32).state_dict().items()}
    lean = {k: v.shape for k, v in DecoderLayer(D, H, 32, cross_attention=False).state_dict().items()}
    removed = {k for k in full if k.startswith(("cross_attn.", "norm2."))}
    assert removed and lean == {k: s for k, s in full.items() if k not in removed}


def test_decoder_layer_without_cross_attention_equals_torch_pre_ln_layer_with_causal_mask():
    """A decoder-only layer is torch's pre-LN TransformerEncoderLayer run with a causal mask."""
    torch.manual_seed(3)
    ours = DecoderLayer(D, H, 32, dropout=0.1, norm_first=True, cross_attention=False).double().eval()
    with torch.no_grad():
        for norm in (ours.norm1, ours.norm3):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    theirs = nn.TransformerEncoderLayer(D, H, 32, dropout=0.1, batch_first=True, norm_first=True,
                                        dtype=F64).eval()
    a, b = ours.self_attn, theirs.self_attn
    with torch.no_grad():
        b.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        b.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        b.out_proj.load_state_dict(a.w_o.state_dict())
    theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
    theirs.norm1.load_state_dict(ours.norm1.state_dict())
    theirs.norm2.load_state_dict(ours.norm3.state_dict())              # their 2nd norm is our FFN norm
    x = x_of(t=6)
    y, self_w, cross_w = ours(x, None, causal_mask(6))
    ref = theirs(x, src_mask=~causal_mask(6))                           # torch: True = blocked
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    assert cross_w is None and float(self_w.detach().triu(1).abs().max()) == 0.0


def test_the_encoder_decoder_transformer_still_has_its_cross_attention():
    layer = Transformer(11, 13, D, H, 2, 32).decoder.layers[0]
    names = {k.split(".")[0] for k in layer.state_dict()}
    assert names == {"self_attn", "cross_attn", "ffn", "norm1", "norm2", "norm3"}
    assert layer.self_attn.num_kv_heads == H and layer.self_attn.rope_base is None

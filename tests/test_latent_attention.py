"""MLA: absorbed = naive (float64, 1e-10); naive = attention with explicitly built per-head K, V (torch SDPA);
the layer = transformers' DeepseekV3Attention (forward and cached decoding, weights copied); cached decoding =
the full causal pass; cache bytes measured = formula; decode FLOPs counted by FlopCounterMode = formula.

Breaks seen to fail: the absorbed default scale 1/sqrt(r + d_r); the absorbed query without its RoPE part;
split_kv_up reading the up-projection as [all k | all v] instead of head by head; absorb_projections
folding W_UV without the per-head W_O block (W_O's view (d_model, d_v, H)); RoPE positions restarting
at 0 in every decoding step (cache offset ignored); the cache storing c before kv_norm; the MLA bytes formula
2 (r + d_r) s; the naive FLOP formula without the V expansion.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnbook import KVCache, apply_rotary
from attnbook import latent_attention as mla

H, DN, DR, DV, R = 3, 4, 4, 5, 6


def _parts(tq=5, tk=5, r=R, dn=DN, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r_ = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return r_(2, H, tq, dn), r_(2, H, tq, DR), r_(2, tk, r), r_(2, tk, DR), r_(H, r, dn), r_(H, r, DV)


def test_naive_equals_sdpa_with_explicit_keys_and_values():
    qn, qr, c, kr, wuk, wuv = _parts()
    k = torch.cat([torch.einsum("btr,hrd->bhtd", c, wuk), kr[:, None].expand(-1, H, -1, -1)], -1)
    v = torch.einsum("btr,hrd->bhtd", c, wuv)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(torch.cat([qn, qr], -1), k, v, attn_mask=causal)   # scale 1/sqrt(d_n+d_r)
    torch.testing.assert_close(mla.mla_attention(qn, qr, c, kr, wuk, wuv, causal)[0], ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("r,tq,tk", [(R, 5, 5), (DN, 1, 9), (20, 3, 7)])
def test_absorbed_equals_naive_in_float64(r, tq, tk):
    qn, qr, c, kr, wuk, wuv = _parts(tq, tk, r=r)
    mask = torch.arange(tk)[None, :] <= torch.arange(tk - tq, tk)[:, None]          # the last tq queries, causal
    naive, pn = mla.mla_attention(qn, qr, c, kr, wuk, wuv, mask)
    absorbed, pa = mla.mla_absorbed_attention(qn, qr, c, kr, wuk, wuv, mask)
    assert absorbed.shape == (2, H, tq, DV)
    torch.testing.assert_close(absorbed, naive, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(pa, pn, rtol=1e-10, atol=1e-10)


def _layer(q_rank=None, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    m = mla.MultiHeadLatentAttention(16, H, R, DN, DR, DV, q_rank=q_rank).to(dtype)
    for norm in [m.kv_norm] + ([m.q_norm] if q_rank else []):
        nn_init = torch.rand(norm.weight.shape, dtype=dtype) + 0.5
        norm.weight.data.copy_(nn_init)
    return m


@pytest.mark.parametrize("absorbed", [False, True])
def test_cached_decoding_equals_the_full_causal_pass(absorbed):
    m = _layer()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    full, _ = m(x)
    cache, outs = KVCache(), []
    for sl in [slice(0, 3), slice(3, 4), slice(4, 5), slice(5, 7)]:               # prefill, then steps and a chunk
        outs.append(m(x[:, sl], cache, absorbed=absorbed)[0])
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-10, atol=1e-10)
    # the cache holds only c (after kv_norm) and the rotated k^R: (r + d_r) numbers per token
    c, k_rope = m.kv_down(x).split([R, DR], -1)
    torch.testing.assert_close(cache.keys[:, 0], m.kv_norm(c), rtol=1e-12, atol=1e-12)
    assert cache.keys.shape == (2, 1, 7, R) and cache.values.shape == (2, 1, 7, DR)
    torch.testing.assert_close(m(x, absorbed=True)[0], full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("q_rank", [None, 8])
def test_folded_projections_give_the_layer_output(q_rank):
    """Attention computed from x with W_QL and W_OL only (no K, no V, no W_UK, no W_UV) equals the layer."""
    m = _layer(q_rank)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    w_ql, w_ol = mla.absorb_projections(m)
    u = x if q_rank is None else m.q_norm(m.q_down(x))                             # input of the last q projection
    q_lat = torch.einsum("btd,hrd->bhtr", u, w_ql)                                 # (B, H, T, r)
    q_lin = m.q_proj if q_rank is None else m.q_up
    q_rope = (u @ q_lin.weight.T).view(2, 5, H, DN + DR).transpose(1, 2)[..., DN:]
    c, k_rope = m.kv_down(x).split([R, DR], -1)
    c = m.kv_norm(c)
    q = torch.cat([q_lat, apply_rotary(q_rope)], -1)
    k = torch.cat([c, apply_rotary(k_rope)], -1)[:, None]
    p = torch.softmax((q @ k.transpose(-2, -1)) / (DN + DR) ** 0.5
                      + torch.full((5, 5), float("-inf")).triu(1), -1)             # (B, H, T, T)
    o_lat = (p @ c[:, None]).transpose(1, 2).reshape(2, 5, H * R)                 # (B, T, H r)
    torch.testing.assert_close(o_lat @ w_ol.T, m(x)[0], rtol=1e-10, atol=1e-10)


def _hf_pair(q_rank):
    tr = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
    cfg = tr.DeepseekV3Config(hidden_size=16, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=q_rank,
                              kv_lora_rank=R, qk_nope_head_dim=DN, qk_rope_head_dim=DR, v_head_dim=DV,
                              num_hidden_layers=1, vocab_size=10, intermediate_size=32, moe_intermediate_size=8,
                              n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1,
                              max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    cfg._attn_implementation = "eager"
    ours = _layer(q_rank, dtype=torch.float32).eval()
    theirs = ds.DeepseekV3Attention(cfg, layer_idx=0).eval()
    names = {"kv_down": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "kv_up": "kv_b_proj", "out_proj": "o_proj",
             "q_proj": "q_proj", "q_down": "q_a_proj", "q_norm": "q_a_layernorm", "q_up": "q_b_proj"}
    with torch.no_grad():
        for ours_name, p in ours.named_parameters():
            mod, attr = ours_name.split(".")
            getattr(getattr(theirs, names[mod]), attr).copy_(p)
    return ours, theirs, ds.DeepseekV3RotaryEmbedding(cfg), tr


@pytest.mark.parametrize("q_rank", [None, 8])
def test_forward_equals_transformers_deepseek_v3(q_rank):
    ours, theirs, rope, _ = _hf_pair(q_rank)
    x = torch.randn(2, 6, 16)
    pos = torch.arange(6)[None]
    additive = torch.full((6, 6), torch.finfo(torch.float32).min).triu(1)[None, None]   # (1, 1, T, T) causal
    with torch.no_grad():
        ref, _ = theirs(x, rope(x, pos), additive)
        got, _ = ours(x)
        got_abs, _ = ours(x, absorbed=True)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_abs, ref, rtol=1e-5, atol=1e-6)


def test_cached_decoding_equals_transformers_with_its_cache():
    ours, theirs, rope, tr = _hf_pair(None)
    x = torch.randn(1, 6, 16)
    hf_cache, cache = tr.DynamicCache(), KVCache()
    with torch.no_grad():
        for t in range(6):
            ref, _ = theirs(x[:, t:t + 1], rope(x, torch.tensor([[t]])), None, cache=hf_cache)
            got, _ = ours(x[:, t:t + 1], cache, absorbed=True)
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    # transformers caches the same latent c: (B, 1, T, r)
    torch.testing.assert_close(cache.keys, hf_cache.layers[0].keys, rtol=1e-5, atol=1e-6)


def test_cache_bytes_measured_equal_the_formula():
    got = mla.kv_cache_bytes_per_token(num_heads=8, head_dim=16, num_kv_heads=2, kv_rank=32, rope_dim=8,
                                       dtype=torch.float32)
    assert got == {"MHA": {"measured": 1024, "formula": 1024}, "GQA": {"measured": 256, "formula": 256},
                   "MQA": {"measured": 128, "formula": 128}, "MLA": {"measured": 160, "formula": 160}}
    # DeepSeek-V3's sizes in bf16: latent (512 + 64) * 2 bytes against 2 * 128 heads * 128 * 2 bytes
    v3 = mla.kv_cache_bytes_per_token(128, 128, 8, 512, 64, tokens=2)
    assert v3["MLA"]["measured"] == 1152 and v3["MHA"]["measured"] == 65536 and v3["GQA"]["measured"] == 4096


@pytest.mark.parametrize("tokens", [1, 9, 33])
def test_decode_flops_counted_equal_the_formula(tokens):
    qn, qr, c, kr, wuk, wuv = _parts(tq=1, tk=tokens)
    qn, qr, c, kr = qn[:1], qr[:1], c[:1], kr[:1]                    # one sequence, one new query
    counted = {}
    for name, fn in [("naive", mla.mla_attention), ("absorbed", mla.mla_absorbed_attention)]:
        with FlopCounterMode(display=False) as fc:
            fn(qn, qr, c, kr, wuk, wuv)
        counted[name] = fc.get_total_flops()
    assert counted == mla.mla_decode_flops(H, DN, DR, DV, R, tokens)


def test_bad_input_raises():
    qn, qr, c, kr, wuk, wuv = _parts()
    with pytest.raises(ValueError, match="W_UK"):
        mla.mla_attention(qn, qr, c, kr, wuk[:, :, :2], wuv)
    with pytest.raises(ValueError, match=r"q_nope of shape \(3, 5, 4\)"):
        mla.mla_absorbed_attention(qn[0], qr, c, kr, wuk, wuv)
    with pytest.raises(ValueError, match="d_model=16"):
        _layer()(torch.randn(2, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="multiple"):
        mla.kv_cache_bytes_per_token(8, 16, 3, 32, 8)

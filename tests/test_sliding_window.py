"""Sliding-window attention: the band mask against its definition and transformers' mask function; the rolling
cache (with and without attention sinks) against torch SDPA with the band mask and against MistralAttention.

Breaks seen to fail: the band one key too wide (d <= window); sinks ignored in band_mask_at; the ring slot
p mod W without the sink offset (overwrites the sinks); the cache keeping the first W tokens instead of the
last W; the cache's mask one key too wide (window + 1); rolling_lm_forward rotating each chunk from
position 0, or skipping the feed-forward sub-layer; streaming_lm_forward rotating the query at n (not
n - 1), or keeping the original positions (both fail the one-layer test).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbook import sliding_window as sw


def _definition(n, window, sinks=0):
    return torch.tensor([[j <= i and (i - j < window or j < sinks) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("n,window,sinks", [(7, 3, 0), (7, 1, 0), (6, 10, 0), (9, 3, 2), (5, 2, 5), (0, 2, 1)])
def test_band_mask_matches_its_definition(n, window, sinks):
    assert torch.equal(sw.band_mask(n, window, sinks), _definition(n, window, sinks).reshape(n, n))
    pos = torch.arange(n)
    assert torch.equal(sw.band_mask_at(pos, pos, window, sinks), sw.band_mask(n, window, sinks))


def test_band_mask_equals_transformers_sliding_window_mask_function():
    mu = pytest.importorskip("transformers.masking_utils")
    for n, w in [(8, 3), (8, 1), (5, 8)]:
        ref = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=n, allow_is_causal_skip=False,
                           mask_function=mu.sliding_window_causal_mask_function(w))
        assert torch.equal(sw.band_mask(n, w), ref[0, 0])


def _qkv(t=13, h=2, hkv=2, d=4, dv=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, h, t, d, generator=g, dtype=torch.float64),
            torch.randn(2, hkv, t, d, generator=g, dtype=torch.float64),
            torch.randn(2, hkv, t, dv, generator=g, dtype=torch.float64))


def _sdpa_band(q, k, v, window, sinks=0):
    mask = sw.band_mask(q.size(2), window, sinks)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)      # torch's own SDPA, True = attend


@pytest.mark.parametrize("window,sinks", [(4, 0), (1, 0), (5, 2), (3, 1), (20, 0)])
@pytest.mark.parametrize("chunks", [[1] * 13, [6, 1, 1, 5], [13], [2, 9, 2]])
def test_rolling_cache_equals_band_attention(window, sinks, chunks):
    q, k, v = _qkv()
    ref = _sdpa_band(q, k, v, window, sinks)
    cache, outs, outs_w, start = sw.RollingKVCache(window, sinks), [], [], 0
    for n in chunks:
        sl = slice(start, start + n)
        out, w = cache.attend(q[:, :, sl], k[:, :, sl], v[:, :, sl])
        outs.append(out)
        outs_w.append(w)
        start += n
        assert len(cache) == min(start, window + sinks)
    torch.testing.assert_close(torch.cat(outs, 2), ref, rtol=1e-12, atol=1e-12)
    # the last call's weights, put back at their key positions, are the last rows of the band attention's weights
    w_last = outs_w[-1]
    full_w = torch.softmax((q @ k.transpose(-2, -1)) / 2 + torch.where(sw.band_mask(13, window, sinks), 0.0,
                                                                          float("-inf")), -1)
    torch.testing.assert_close(w_last, full_w[:, :, 13 - chunks[-1]:, cache.key_positions], rtol=1e-12, atol=1e-12)
    # the cache holds exactly the sinks and the last W tokens
    held = sorted(cache.positions[cache.positions >= 0].tolist())
    assert held == sorted(set(range(min(sinks, 13))) | set(range(max(0, 13 - window), 13)))


def test_rolling_cache_storage_is_fixed():
    q, k, v = _qkv(t=40, d=8, dv=8)
    q, k, v = q.float(), k.float(), v.float()
    cache, seen = sw.RollingKVCache(window=6, sinks=2), set()
    for t in range(40):
        cache.attend(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1])
        seen.add(cache.allocated_nbytes())
    assert seen == {2 * 2 * 2 * (2 + 6) * 8 * 4}                       # 2 (K, V) * B * H * (s + W) * D * 4 bytes


def test_mqa_keys_broadcast_over_query_heads():
    q, k, v = _qkv(h=3, hkv=1)
    cache = sw.RollingKVCache(4)
    out = torch.cat([cache.attend(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1])[0] for t in range(13)], 2)
    torch.testing.assert_close(out, _sdpa_band(q, k.expand(-1, 3, -1, -1), v.expand(-1, 3, -1, -1), 4),
                               rtol=1e-12, atol=1e-12)


def test_rolling_cache_decoding_equals_mistral_attention():
    """Token-by-token decoding with the rolling cache equals transformers' MistralAttention (sliding_window)
    run over the whole sequence with the mask transformers builds for it."""
    tr = pytest.importorskip("transformers")
    from transformers.masking_utils import create_sliding_window_causal_mask
    from transformers.models.mistral import modeling_mistral as mm
    cfg = tr.MistralConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=2, head_dim=8,
                           sliding_window=4, max_position_embeddings=64, intermediate_size=32,
                           num_hidden_layers=1, vocab_size=10)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    attn = mm.MistralAttention(cfg, layer_idx=0).double().eval()
    rope = mm.MistralRotaryEmbedding(cfg)
    T = 11
    x = torch.randn(1, T, 16, dtype=torch.float64)
    pos = torch.arange(T)[None]
    cos, sin = rope(x, pos)
    mask = create_sliding_window_causal_mask(config=cfg, inputs_embeds=x, attention_mask=None, cache=None,
                                             position_ids=pos, allow_is_causal_skip=False)
    with torch.no_grad():
        ref, _ = attn(x, (cos, sin), mask)
        shape = (1, T, 2, 8)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = mm.apply_rotary_pos_emb(q, k, cos, sin)
        cache = sw.RollingKVCache(cfg.sliding_window)
        out = torch.cat([cache.attend(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1])[0]
                         for t in range(T)], 2)                          # (1, H, T, D)
        ours = attn.o_proj(out.transpose(1, 2).reshape(1, T, 16))
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    assert len(cache) == 4


def test_bad_input_raises():
    with pytest.raises(ValueError, match="window"):
        sw.RollingKVCache(0)
    with pytest.raises(ValueError, match="sinks"):
        sw.band_mask(4, 2, -1)
    cache = sw.RollingKVCache(3)
    with pytest.raises(ValueError, match=r"\(B, H, Tn, D\)"):
        cache.attend(torch.randn(1, 2, 3), torch.randn(1, 2, 3), torch.randn(1, 2, 3))


def _gpt(kv=None, seed=0):
    from attnbook.gpt import DecoderOnlyLM
    torch.manual_seed(seed)
    return DecoderOnlyLM(19, 16, 4, 3, 32, num_kv_heads=kv).double().eval()


@pytest.mark.parametrize("window,sinks,chunk", [(4, 0, 1), (4, 2, 1), (3, 1, 5), (5, 2, None), (20, 0, 3)])
@pytest.mark.parametrize("kv", [None, 2])
def test_rolling_lm_forward_equals_the_masked_forward(window, sinks, chunk, kv):
    model = _gpt(kv)
    ids = torch.randint(0, 19, (2, 14), generator=torch.Generator().manual_seed(1))
    logits, weights = sw.rolling_lm_forward(model, ids, window, sinks, chunk)
    with torch.no_grad():
        ref = model(ids, attn_mask=sw.band_mask(14, window, sinks))
        torch.testing.assert_close(logits, ref, rtol=1e-10, atol=1e-10)
        if window < 14:
            assert not torch.allclose(ref, model(ids))                      # the window did cut something
    assert len(weights) == 3 and all(w.shape[:2] == (2, 4) for w in weights)


def test_rolling_lm_forward_with_a_wide_window_is_full_attention_and_returns_its_weights():
    model = _gpt()
    ids = torch.randint(0, 19, (2, 9), generator=torch.Generator().manual_seed(2))
    logits, weights = sw.rolling_lm_forward(model, ids, window=9)
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids), rtol=1e-10, atol=1e-10)
        h = model.layers[0].norm1(model.embed(ids))
        _, ref_w = model.layers[0].self_attn(h, h, h, sw.band_mask(9, 9))  # (B, H, T, T)
    torch.testing.assert_close(weights[0], ref_w, rtol=1e-10, atol=1e-10)


def test_rolling_lm_forward_rejects_bad_input():
    with pytest.raises(ValueError, match="DecoderOnlyLM"):
        sw.rolling_lm_forward(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"\(B, T\) int64"):
        sw.rolling_lm_forward(_gpt(), torch.zeros(3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="chunk"):
        sw.rolling_lm_forward(_gpt(), torch.zeros(1, 3, dtype=torch.long), 2, chunk=0)


# --- StreamingLLM's positions: renumbered inside the cache ----------------------------------------------

@pytest.mark.parametrize("kv", [None, 2])
def test_streaming_without_sinks_equals_the_band_mask_and_without_eviction_the_full_model(kv):
    # RoPE's scores depend on i - j only: with no sinks, renumbering the window keeps every distance
    model = _gpt(kv)
    ids = torch.randint(0, 19, (2, 14), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(sw.streaming_lm_forward(model, ids, 4), model(ids, attn_mask=sw.band_mask(14, 4)),
                                   rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(sw.streaming_lm_forward(model, ids, 10, 4), model(ids), rtol=1e-10, atol=1e-10)


def test_streaming_with_sinks_one_layer_equals_the_model_on_the_held_tokens():
    # one layer: the query at t sees the held tokens' embeddings only, at positions 0 .. n-1, i.e. exactly a
    # plain causal forward over the held tokens (the last row) -- and differs from the original positions
    from attnbook.gpt import DecoderOnlyLM
    torch.manual_seed(4)
    model = DecoderOnlyLM(19, 16, 4, 1, 32).double().eval()
    ids = torch.randint(0, 19, (2, 15), generator=torch.Generator().manual_seed(5))
    window, sinks = 4, 2
    logits = sw.streaming_lm_forward(model, ids, window, sinks)
    with torch.no_grad():
        for t in range(15):
            held = [j for j in range(t + 1) if j < sinks or t - j < window]
            torch.testing.assert_close(logits[:, t], model(ids[:, held])[:, -1], rtol=1e-10, atol=1e-10)
        assert not torch.allclose(logits, model(ids, attn_mask=sw.band_mask(15, window, sinks)))


def test_streaming_rejects_bad_input():
    with pytest.raises(ValueError, match="DecoderOnlyLM"):
        sw.streaming_lm_forward(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="window"):
        sw.streaming_lm_forward(_gpt(), torch.zeros(1, 3, dtype=torch.long), 0)


@pytest.mark.parametrize("kv", [None, 2])
def test_clamped_without_a_clamp_is_the_model_and_at_zero_has_no_positions(kv):
    model = _gpt(kv)
    ids = torch.randint(0, 19, (2, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(ids)
        torch.testing.assert_close(sw.clamped_lm_forward(model, ids, 11), full, rtol=1e-10, atol=1e-10)
        clamped = sw.clamped_lm_forward(model, ids, 4)
        torch.testing.assert_close(clamped[:, :5], full[:, :5], rtol=1e-10, atol=1e-10)   # no distance > 4 yet
        assert not torch.allclose(clamped[:, 5:], full[:, 5:])
        zero = sw.clamped_lm_forward(model, ids, 0)              # every key at distance 0: RoPE rotates nothing
        for layer in model.layers:
            layer.self_attn.rope_base = None
        torch.testing.assert_close(zero, model(ids), rtol=1e-10, atol=1e-10)


def test_clamped_rejects_bad_input():
    with pytest.raises(ValueError, match="DecoderOnlyLM"):
        sw.clamped_lm_forward(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="max_distance"):
        sw.clamped_lm_forward(_gpt(), torch.zeros(1, 3, dtype=torch.long), -1)

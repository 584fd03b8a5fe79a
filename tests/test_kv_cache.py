"""KVCache: incremental decoding equals full causal attention recomputed from scratch (torch SDPA)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnbook import KVCache

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _seq(b=2, h=3, t=11, d=8, dv=5, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, t, d, generator=g, dtype=dtype).to(device),
            torch.randn(b, h, t, d, generator=g, dtype=dtype).to(device),
            torch.randn(b, h, t, dv, generator=g, dtype=dtype).to(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_len", [None, 11])
def test_step_by_step_equals_full_recomputation(max_len, device):
    q, k, v = _seq(device=device)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)     # (B, H, T, Dv)
    cache = KVCache(max_len)
    for t in range(q.size(2)):
        out, w = cache.attend(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1])
        # step t equals row t of causal attention over the whole prefix, recomputed from scratch
        prefix = F.scaled_dot_product_attention(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], is_causal=True)
        torch.testing.assert_close(out, prefix[:, :, -1:], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out, full[:, :, t:t + 1], rtol=1e-12, atol=1e-12)
        assert w.shape == (2, 3, 1, t + 1) and len(cache) == t + 1
    torch.testing.assert_close(cache.keys, k, rtol=0, atol=0)
    torch.testing.assert_close(cache.values, v, rtol=0, atol=0)


@pytest.mark.parametrize("chunks", [[11], [4, 1, 1, 5], [1, 3, 7], [2] * 5 + [1]])
def test_prefill_then_chunks_equal_full_causal_attention(chunks):
    q, k, v = _seq()
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        sl = slice(start, start + n)
        outs.append(cache.attend(q[:, :, sl], k[:, :, sl], v[:, :, sl])[0])
        start += n
    torch.testing.assert_close(torch.cat(outs, 2), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-12, atol=1e-12)


def test_growth_keeps_every_token_and_nbytes_counts_them():
    _, k, v = _seq(t=40, d=4, dv=4, dtype=torch.float32)
    cache = KVCache()
    for t in range(40):                                     # grows past 16, 32 by doubling
        keys, values = cache.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
        torch.testing.assert_close(keys, k[:, :, :t + 1], rtol=0, atol=0)
    torch.testing.assert_close(values, v, rtol=0, atol=0)
    assert cache.nbytes() == 2 * 2 * 3 * 40 * 4 * 4         # 2 (K and V) * B * H * T * D * 4 bytes
    cache.reset()
    assert len(cache) == 0 and cache.keys is None and cache.nbytes() == 0


def test_allocated_bytes_are_the_capacity_not_the_length():
    cache = KVCache()
    k = torch.randn(2, 3, 1, 4)
    seen = []
    for t in range(1, 40):
        cache.append(k, k)
        seen.append((t, cache.capacity, cache.allocated_nbytes()))
    for t, cap, nbytes in seen:                                # 16, then doubling: 32, 64
        assert cap == max(16, 16 * 2 ** math.ceil(math.log2(t / 16))) and nbytes == 2 * 2 * 3 * cap * 4 * 4
    assert cache.nbytes() == 2 * 2 * 3 * 39 * 4 * 4 < cache.allocated_nbytes()
    assert KVCache(max_len=7).capacity == 0 == KVCache().allocated_nbytes()


def test_reorder_equals_a_cache_built_from_the_picked_rows():
    """After reorder(index), appending more tokens gives what a cache fed rows index from the start gives."""
    _, k, v = _seq(t=5, b=4)
    index = torch.tensor([2, 2, 0, 3])                      # beams: row 2 has two children, row 1 none
    cache = KVCache(max_len=5)                              # preallocated: reorder must keep the spare room
    cache.append(k[:, :, :3], v[:, :, :3])
    cache.reorder(index)
    keys, values = cache.append(k[index, :, 3:], v[index, :, 3:])
    reference = KVCache()
    ref_keys, ref_values = reference.append(k[index], v[index])
    assert torch.equal(keys, ref_keys) and torch.equal(values, ref_values)


def test_bad_input():
    q, k, v = _seq(t=3)
    cache = KVCache(max_len=4)
    cache.append(k, v)
    with pytest.raises(ValueError, match="cannot append 3 tokens to a cache holding 3 with max_len=4"):
        cache.append(k, v)
    with pytest.raises(ValueError, match=r"do not match the cache's \(B, H, T, D\) = \(2, 3, 3, 8\)"):
        cache.append(k[:, :2, :1], v[:, :2, :1])
    with pytest.raises(ValueError, match=r"must be a floating-point \(B, H, Tn, D\) tensor, got torch.float64 "
                                         r"tensor of shape \(3, 3, 8\)"):
        KVCache().append(k[0], v[0])
    with pytest.raises(ValueError, match="max_len must be a positive integer or None, got 0"):
        KVCache(0)
    with pytest.raises(ValueError, match=r"q \(2, 3, 2, 8\) must have the shape of the new keys \(2, 3, 1, 8\)"):
        KVCache().attend(q[:, :, :2], k[:, :, :1], v[:, :, :1])
    with pytest.raises(ValueError, match=r"index must lie in \[0, 2\), got min 0, max 2"):
        cache.reorder(torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"index must be a 1-D int64 tensor, got torch.float32 \(2,\)"):
        cache.reorder(torch.tensor([0.0, 1.0]))


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


def test_bad_arguments_are_named():
    k, q, v = _seq(b=1, h=2, t=3, d=4, dv=5)
    for kwargs_max_len, message in [(True, "^max_len must be a positive integer or None, got True"),
                                    (0, "^max_len must be")]:
        with pytest.raises(ValueError, match=message):
            KVCache(kwargs_max_len)
    cache = KVCache()
    for args, message in [((k.tolist(), v), "^k must be a floating-point \\(B, H, Tn, D\\) tensor, got list"),
                          ((k, v.long()), r"^v must be .* got torch.int64 tensor of shape \(1, 2, 3, 5\)"),
                          ((k, v.float()), r"must agree in \(B, H, Tn\), dtype and device"),
                          ((k, v[:, :, :2]), r"^k \(1, 2, 3, 4\) and v \(1, 2, 2, 5\) must agree in \(B, H, Tn\)")]:
        with pytest.raises(ValueError, match=message):
            cache.append(*args)
    cache.append(k, v)
    for args in [(k[..., :3], v), (k, v[..., :4]), (k.float(), v.float())]:  # D, Dv, dtype differ
        with pytest.raises(ValueError, match=r"do not match the cache's \(B, H, T, D\) = \(1, 2, 3, 4\), Dv = 5"):
            cache.append(*args)
    for index, got in [([0], "list"), (torch.tensor([0.0, 1.0]), r"torch.float32 \(2,\)")]:
        with pytest.raises(ValueError, match=f"^index must be a 1-D int64 tensor, got {got}"):
            cache.reorder(index)
    with pytest.raises(ValueError, match=r"^q list must have the shape of the new keys \(1, 2, 3, 4\)"):
        KVCache().attend(q.tolist(), k, v)
    with pytest.raises(ValueError, match=r"^q \(1, 2, 3, 4\) must have the shape of the new keys \(\)"):
        KVCache().attend(q, k.tolist(), v)


def test_one_token_cache_and_capacity_doubling():
    k, _, v = _seq(b=1, h=1, t=40, d=2, dv=2)
    one = KVCache(1)
    one.append(k[:, :, :1], v[:, :, :1])
    assert len(one) == 1
    # Without max_len the buffer starts at max(need, 16) and doubles: amortised O(1) copying per token.
    cache, capacities = KVCache(), []
    for t in range(40):
        cache.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
        capacities.append(cache._k.size(2))
    assert sorted(set(capacities)) == [16, 32, 64] and capacities.index(32) == 16
    big = KVCache()
    big.append(k[:, :, :20], v[:, :, :20])
    assert big._k.size(2) == 20
    big.append(k[:, :, 20:21], v[:, :, 20:21])
    assert big._k.size(2) == 40


def test_attend_chunks_with_one_feature_and_a_given_scale():
    q, k, v = _seq(b=1, h=2, t=6, d=1, dv=3)
    out, _ = KVCache().attend(q, k, v, scale=0.3)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    torch.testing.assert_close(out, ref)


def test_attend_builds_its_mask_on_the_inputs_device():
    q = torch.randn(1, 2, 3, 4, device="meta")  # meta stands in for CUDA
    cache = KVCache()
    cache.attend(q[:, :, :1], q[:, :, :1], q[:, :, :1])
    assert cache.attend(q, q, q)[0].device.type == "meta"

"""Online softmax, tiled attention (forward and recomputing backward), sparse patterns, memory measurement.

References: torch.softmax / torch.logsumexp, F.scaled_dot_product_attention, attnbook's eager
scaled_dot_product_attention with explicitly built masks, autograd and gradcheck in float64,
closed-form allocation sizes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

import attnbook
from attnbook import (online_softmax, online_softmax_stats, peak_memory, scaled_dot_product_attention,
                      sliding_window_mask, strided_attention, strided_mask, tiled_attention,
                      tiled_attention_recompute)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-11, atol=1e-12)


def _qkv(batch, tq, tk, d=16, dv=8, dtype=torch.float32, device="cpu", seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g, dtype=dtype).to(device).requires_grad_(grad)  # noqa: E731
    return make(*batch, tq, d), make(*batch, tk, d), make(*batch, tk, dv)


def _pair_mask(tq, tk, causal=False, window=None):
    """Explicit (Tq, Tk) mask from the definition, one pair at a time."""
    rows = [[(not causal or j <= i) and (window is None or abs(i - j) < window) for j in range(tk)]
            for i in range(tq)]
    return torch.tensor(rows, dtype=torch.bool).reshape(tq, tk)


# ---------------------------------------------------------------- online softmax

@pytest.mark.parametrize("block_size", [1, 3, 8, 100])
def test_online_softmax_equals_softmax_and_logsumexp(block_size):
    x = 20 * torch.randn(4, 3, 37, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, -1), **F64)
    m, l = online_softmax_stats(x, block_size)
    torch.testing.assert_close(m, x.amax(-1, keepdim=True), rtol=0, atol=0)   # the running max is the max
    torch.testing.assert_close(m + l.log(), torch.logsumexp(x, -1, keepdim=True), **F64)


def test_online_softmax_does_not_overflow_and_handles_masked_entries():
    x = torch.tensor([[1000.0, -1000.0, 999.0, -math.inf], [-math.inf, -math.inf, 0.0, 1.0]])
    torch.testing.assert_close(online_softmax(x, 1), torch.softmax(x, -1))
    m, l = online_softmax_stats(torch.full((2, 5), -math.inf), 2)
    assert bool((m == -math.inf).all()) and bool((l == 0).all())


def test_online_softmax_bad_input():
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        online_softmax(torch.randn(3), 0)
    with pytest.raises(ValueError, match=r"non-empty floating-point tensor, got torch.int64 tensor of shape \(3,\)"):
        online_softmax_stats(torch.arange(3))


# ---------------------------------------------------------------- tiled forward

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq, tk, block_size", [(37, 37, 8), (37, 37, 128), (100, 100, 7), (129, 129, 64),
                                                 (33, 50, 16), (50, 33, 16), (1, 19, 4)])
def test_tiled_equals_torch_sdpa_and_eager_fp32(tq, tk, block_size, causal, device):
    q, k, v = _qkv((2, 3), tq, tk, device=device)
    out = tiled_attention(q, k, v, block_size=block_size, causal=causal)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, **F32)
    mask = _pair_mask(tq, tk, causal).to(device) if causal else None
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, mask)[0], **F32)
    assert out.dtype == torch.float32 and out.device == q.device


@pytest.mark.parametrize("batch", [(), (3,), (2, 2, 2)])
def test_tiled_float64_any_batch_and_scale(batch):
    q, k, v = _qkv(batch, 21, 26, dtype=torch.float64)
    out = tiled_attention(q, k, v, block_size=5, scale=0.3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3), **F64)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq, tk, window, block_size", [(40, 40, 1, 8), (40, 40, 5, 8), (40, 40, 9, 16),
                                                         (37, 23, 6, 5), (30, 10, 3, 4)])
def test_tiled_sliding_window_equals_explicit_mask(tq, tk, window, block_size, causal):
    q, k, v = _qkv((2,), tq, tk, dtype=torch.float64)
    mask = _pair_mask(tq, tk, causal, window)
    out = tiled_attention(q, k, v, block_size=block_size, causal=causal, window=window)
    ref, _ = scaled_dot_product_attention(q, k, v, mask)     # rows with no key: zero output
    torch.testing.assert_close(out, ref, **F64)
    assert not out.isnan().any()
    if tq == 30:                                              # queries i >= 12 see no key at all
        assert (~mask.any(-1)).sum() > 0 and bool((out[:, ~mask.any(-1)] == 0).all())


def test_causal_tiling_skips_future_blocks_and_window_skips_old_blocks():
    # NaN in keys/values a query may not see: a skipped tile never touches them, a masked one would
    # still multiply 0 * NaN in P @ V. Block-aligned NaNs test the skipping, not the masking.
    q, k, v = _qkv((2,), 32, 32, dtype=torch.float64)
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[:, 8:], v_bad[:, 8:] = math.nan, math.nan
    out = tiled_attention(q, k_bad, v_bad, block_size=8, causal=True)
    torch.testing.assert_close(out[:, :8], F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :8])
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[:, :8], v_bad[:, :8] = math.nan, math.nan           # window 4: queries 11.. never see 0..7
    out = tiled_attention(q, k_bad, v_bad, block_size=8, causal=True, window=4)
    ref, _ = scaled_dot_product_attention(q, k, v, _pair_mask(32, 32, True, 4))
    torch.testing.assert_close(out[:, 16:], ref[:, 16:])


def test_tiled_bfloat16_matches_fp32_reference():
    q, k, v = _qkv((2, 2), 70, 70, d=32, dv=32)
    out = tiled_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), block_size=16, causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=3e-2)


def test_tiled_bad_input():
    q, k, v = _qkv((2,), 5, 6)
    with pytest.raises(ValueError, match=r"q \(2, 5, 16\), k \(2, 6, 16\), v \(2, 7, 8\)"):
        tiled_attention(q, k, torch.randn(2, 7, 8))
    with pytest.raises(ValueError, match=r"same batch dimensions"):
        tiled_attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        tiled_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="window must be a positive integer, got -2"):
        tiled_attention(q, k, v, window=-2)
    with pytest.raises(ValueError, match="scale must be a finite number > 0, got nan"):
        tiled_attention(q, k, v, scale=math.nan)
    with pytest.raises(ValueError, match="share dtype and device"):
        tiled_attention(q, k.double(), v)


# ---------------------------------------------------------------- recomputing backward

@pytest.mark.parametrize("causal, window, tq, tk, block_size", [(False, None, 13, 13, 4), (True, None, 13, 13, 4),
                                                                 (True, 3, 13, 13, 5), (False, 4, 11, 17, 3),
                                                                 (True, 2, 16, 6, 4)])
def test_recompute_backward_equals_autograd(causal, window, tq, tk, block_size):
    q, k, v = _qkv((2, 2), tq, tk, d=6, dv=5, dtype=torch.float64, grad=True)
    g = torch.randn(2, 2, tq, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    mask = _pair_mask(tq, tk, causal, window)
    ref_out, _ = scaled_dot_product_attention(q, k, v, mask)
    ref = torch.autograd.grad(ref_out, (q, k, v), g)
    out = tiled_attention_recompute(q, k, v, block_size, causal, window)
    torch.testing.assert_close(out, ref_out, **F64)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), g), ref):
        torch.testing.assert_close(got, want, **F64)
        assert not got.isnan().any()


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 2), (False, 3)])
def test_recompute_backward_gradcheck(causal, window):
    q, k, v = _qkv((2,), 7, 9, d=4, dv=3, dtype=torch.float64, grad=True)
    assert gradcheck(lambda a, b, c: tiled_attention_recompute(a, b, c, 3, causal, window), (q, k, v))


def test_recompute_backward_float32_matches_autograd_through_the_tiles():
    q, k, v = _qkv((1, 2), 45, 45, grad=True)
    ref = torch.autograd.grad(tiled_attention(q, k, v, 16, True).square().sum(), (q, k, v))
    got = torch.autograd.grad(tiled_attention_recompute(q, k, v, 16, True).square().sum(), (q, k, v))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **F32)


# ---------------------------------------------------------------- sparse patterns

@pytest.mark.parametrize("n, window, causal", [(0, 3, True), (1, 1, True), (9, 3, True), (9, 3, False), (6, 20, False)])
def test_sliding_window_mask_against_definition(n, window, causal):
    assert torch.equal(sliding_window_mask(n, window, causal), _pair_mask(n, n, causal, window))


@pytest.mark.parametrize("n, stride, causal", [(10, 3, True), (10, 3, False), (7, 1, True), (5, 9, True)])
def test_strided_mask_against_definition(n, stride, causal):
    ref = torch.tensor([[(i - j) % stride == 0 and (not causal or j <= i) for j in range(n)] for i in range(n)])
    assert torch.equal(strided_mask(n, stride, causal), ref)
    union = sliding_window_mask(n, stride, causal) | strided_mask(n, stride, causal)
    if causal:   # Child et al.'s strided pattern is causal attention when stride = 1 or stride >= n
        assert torch.equal(union, attnbook.causal_mask(n)) == (stride == 1 or stride >= n)


@pytest.mark.parametrize("t, stride, causal", [(24, 4, True), (23, 4, True), (23, 5, False), (3, 8, True), (17, 1, False)])
def test_strided_attention_equals_masked_attention(t, stride, causal):
    q, k, v = _qkv((2, 2), t, t, dtype=torch.float64)
    ref, _ = scaled_dot_product_attention(q, k, v, strided_mask(t, stride, causal))
    torch.testing.assert_close(strided_attention(q, k, v, stride, causal), ref, **F64)


def test_sparse_bad_input():
    with pytest.raises(ValueError, match="window must be a positive integer, got 0"):
        sliding_window_mask(5, 0)
    with pytest.raises(ValueError, match="n must be a non-negative integer, got -1"):
        strided_mask(-1, 2)
    q, k, v = _qkv((), 6, 7)
    with pytest.raises(ValueError, match=r"need the same T"):
        strided_attention(q, k, v, 2)


# ---------------------------------------------------------------- memory

def test_peak_memory_counts_allocator_bytes_exactly():
    x = torch.zeros(2**18)                                    # 1 MiB of float32, allocated before
    assert peak_memory(lambda: torch.empty(2**18)) == 2**20
    # (x + 1) lives while (x + 1) * 2 is made: two 1 MiB buffers at the peak, one returned
    # (plus a few bytes: the Python scalars 1 and 2 become 0-d tensors)
    assert 0 <= peak_memory(lambda t: (t + 1) * 2, x) - 2 * 2**20 < 64
    assert peak_memory(lambda t: t.view(512, 512), x) == 0


def test_memory_timeline_names_the_allocating_ops():
    x = torch.zeros(2**18)
    big = [(op, nbytes) for op, nbytes, _ in attnbook.memory_timeline(lambda t: (t + 1) * 2, x) if nbytes >= 2**20]
    assert big == [("aten::add", 2**20), ("aten::mul", 2**20)]
    live = [after for _, _, after in attnbook.memory_timeline(lambda t: (t + 1) * 2, x)]
    assert max(live) == peak_memory(lambda t: (t + 1) * 2, x)


def test_results_markdown_ratios_against_the_baseline():
    res = {"rows": [{"T": 8, "method": "sdpa", "median_ms": 2.0, "sdpa_backend": "math", "tflops": 0.5, "peak_mib": 1.0},
                    {"T": 8, "method": "tiled", "median_ms": 5.0, "sdpa_backend": None, "tflops": 0.2}]}
    lines = attnbook.results_markdown(res).splitlines()
    assert lines[0].startswith("| T | 实现 | SDPA 内核 |")
    assert lines[2] == "| 8 | SDPA（默认内核） | math | 2.00 | 1.00 | 0.500 | 1.0 |"
    assert lines[3] == "| 8 | 分块实现 | – | 5.00 | 2.50 | 0.200 | – |"


def test_aten_calls_match_the_profiler_and_count_a_fused_kernel_once():
    from attnbook.benchmark import aten_calls

    x = torch.zeros(4, 8)
    assert aten_calls(lambda t: (t + 1) * 2, x) == ["add", "mul"]
    q, k, v = _qkv((1, 2), 16, 16, d=8, dv=8)
    with torch.no_grad():
        assert aten_calls(torch.nn.functional.scaled_dot_product_attention, q, k, v) \
            == ["_scaled_dot_product_flash_attention_for_cpu"]
        # the profiler (an independent recorder) sees every one of the tiled loop's matmuls
        with torch.profiler.profile() as prof:
            tiled_attention(q, k, v, block_size=4)
        bmm = sum(e.count for e in prof.key_averages() if e.key == "aten::bmm")
        assert aten_calls(tiled_attention, q, k, v, block_size=4).count("bmm") == bmm == 2 * 4 * 4


def _peaks(fn, lengths, heads=2, d=16):
    out = []
    for t in lengths:
        q, k, v = _qkv((1, heads), t, t, d=d, dv=d)
        out.append(peak_memory(fn, q, k, v))
    return out


def test_memory_growth_when_t_doubles_tiled_linear_eager_quadratic():
    tiled = _peaks(lambda q, k, v: tiled_attention(q, k, v, block_size=32), [128, 256])
    eager = _peaks(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0], [128, 256])
    assert tiled[1] / tiled[0] <= 2.2, tiled
    assert eager[1] / eager[0] >= 3.5, eager
    # the tiled peak is the output plus O(block^2) tiles; eager holds (T, T) matrices
    assert tiled[1] < 4 * (2 * 256 * 16 * 4) and eager[1] >= 2 * 256 * 256 * 4


def test_recompute_backward_needs_far_less_memory_than_autograd_through_tiles():
    def train_step(fn):
        def step(q, k, v):
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            fn(q, k, v).sum().backward()
        return step
    through = _peaks(train_step(lambda q, k, v: tiled_attention(q, k, v, 32)), [128, 256], heads=1, d=8)
    recompute = _peaks(train_step(lambda q, k, v: tiled_attention_recompute(q, k, v, 32)), [128, 256], heads=1, d=8)
    assert recompute[1] / recompute[0] <= 2.2, recompute
    assert through[1] / through[0] >= 3.0, through      # every tile's P is kept for backward
    assert recompute[1] * 3 < through[1]


def test_sdpa_backend_names_the_kernel_that_ran():
    from torch.nn.attention import SDPBackend
    q, k, v = _qkv((1, 2), 64, 64, d=64, dv=64)
    assert attnbook.sdpa_backend(q, k, v, SDPBackend.MATH) == "math"
    assert attnbook.sdpa_backend(q, k, v, SDPBackend.FLASH_ATTENTION) == "flash (CPU)"


def test_time_interleaved_calls_each_function_round_robin():
    calls = []
    times = attnbook.time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                      repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4 and all(len(t) == 3 and min(t) >= 0 for t in times.values())


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


def test_float16_tiles_stay_within_float16_rounding():
    # 1024 keys in float16, statistics in float32: the error is the float16 rounding of p and of the
    # output (at most 9e-4 here over seeds 0-2).
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 4, 64, 16, generator=g), torch.randn(2, 4, 1024, 16, generator=g), \
        torch.randn(2, 4, 1024, 16, generator=g)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    out = tiled_attention(q.half(), k.half(), v.half(), block_size=64)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=2e-3)


def test_block_size_one_and_queries_of_very_different_scale():
    q, k, v = _qkv((2,), 5, 7, dtype=torch.float64)
    ref, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=1), ref, **F64)
    q = q.clone()
    q[1] *= 1000  # scores near 1e3 in batch 1 only: each row must be shifted by its own max
    ref, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=2), ref, **F64)


def test_documented_defaults_and_scales():
    q, k, v = _qkv((2,), 6, 6, dtype=torch.float64, grad=True)
    ref, _ = scaled_dot_product_attention(q, k, v)                  # non-causal by default
    torch.testing.assert_close(tiled_attention_recompute(q, k, v), ref, **F64)
    ref3, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(tiled_attention_recompute(q, k, v, scale=0.3), ref3, **F64)
    g = torch.randn_like(ref3)
    grads = torch.autograd.grad(tiled_attention_recompute(q, k, v, scale=0.3), (q, k, v), g)
    for a, b in zip(grads, torch.autograd.grad(ref3, (q, k, v), g)):
        torch.testing.assert_close(a, b, **F64)
    strided, _ = scaled_dot_product_attention(q, k, v, strided_mask(6, 2, True), scale=0.3)
    torch.testing.assert_close(strided_attention(q, k, v, 2, scale=0.3), strided)  # causal by default
    assert torch.equal(sliding_window_mask(5, 2), _pair_mask(5, 5, True, 2))
    assert torch.equal(strided_mask(5, 2), strided_mask(5, 2, True))
    torch.testing.assert_close(strided_attention(q[0], k[0], v[0], 2, causal=False),  # 2-D inputs
                               scaled_dot_product_attention(q[0], k[0], v[0], strided_mask(6, 2, False))[0])


def test_online_softmax_of_one_entry_and_bad_shapes():
    torch.testing.assert_close(online_softmax(torch.tensor([3.0])), torch.tensor([1.0]))
    for x, message in [(torch.tensor(1.0), r"got torch.float32 tensor of shape \(\)"),
                       (torch.zeros(2, 0), r"got torch.float32 tensor of shape \(2, 0\)"), ([1.0], "got list$")]:
        with pytest.raises(ValueError, match=message):
            online_softmax(x)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: tiled_attention(q.tolist(), k, v),
     r"^q must be a floating-point tensor \(\.\.\., T, D\), got list"),
    (lambda q, k, v: tiled_attention(q, k.long(), v), r"^k must be .* got torch.int64 tensor of shape \(2, 5, 4\)"),
    (lambda q, k, v: tiled_attention(q, k, v[0]), r"^v must be|batch dimensions"),
    (lambda q, k, v: tiled_attention(q, k, v.tolist()), "^v must be a floating-point tensor .* got list"),
    (lambda q, k, v: tiled_attention(q[..., :0], k[..., :0], v), r"^q \(2, 3, 0\) and k \(2, 5, 0\): need D >= 1"),
    (lambda q, k, v: tiled_attention(q, k[:, :0], v[:, :0]), r"need D >= 1 and Tk >= 1$"),
    (lambda q, k, v: tiled_attention(q, k, v, scale=True), "^scale must be a finite number > 0, got True"),
    (lambda q, k, v: tiled_attention(q, k, v, scale=0), "^scale must be a finite number > 0, got 0"),
    (lambda q, k, v: strided_attention(q, k, v, 0), "^stride must be a positive integer, got 0"),
    (lambda q, k, v: strided_mask(4, 0), "^stride must be a positive integer, got 0"),
    (lambda q, k, v: strided_mask(4, True), "^stride must be a positive integer, got True"),
    (lambda q, k, v: strided_mask(True, 2), "^n must be a non-negative integer, got True"),
])
def test_efficient_bad_arguments_are_named(call, message):
    q, k, v = _qkv((2,), 3, 5, d=4, dv=2)
    with pytest.raises(ValueError, match=message):
        call(q, k, v)


def test_one_feature_and_one_key_are_valid():
    q, k, v = _qkv((2,), 3, 1, d=1, dv=2, dtype=torch.float64)
    torch.testing.assert_close(tiled_attention(q, k, v), scaled_dot_product_attention(q, k, v)[0], **F64)


def test_efficient_masks_and_tiles_on_the_inputs_device():
    q = torch.randn(2, 6, 4, device="meta")  # meta stands in for CUDA
    assert sliding_window_mask(5, 2, device="meta").device.type == "meta"
    assert strided_mask(5, 2, device="meta").device.type == "meta"
    assert tiled_attention(q, q, q, block_size=4, causal=True, window=3).device.type == "meta"
    assert strided_attention(q, q, q, 2).device.type == "meta"

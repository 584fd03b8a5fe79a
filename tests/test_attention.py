"""Scaled dot-product attention, its manual backward and SelfAttention, against torch references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

import attnbook
from attnbook import attention_backward, manual_attention, scaled_dot_product_attention

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _qkv(batch, tq, tk, d, dv, dtype=torch.float64, device="cpu", seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g, dtype=dtype).to(device).requires_grad_(requires_grad)  # noqa: E731
    return make(*batch, tq, d), make(*batch, tk, d), make(*batch, tk, dv)


def _random_mask(shape, seed=1, p=0.6):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(*shape, generator=g) < p
    m[..., 0] = True  # every query keeps at least one key
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torch_sdpa_without_mask(batch, dtype, device):
    q, k, v = _qkv(batch, 5, 7, 8, 3, dtype, device)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, ref, **tol)
    # the weights, against softmax of the explicitly scaled scores
    ref_w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(w, ref_w, **tol)
    assert out.device == q.device and out.dtype == dtype


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_inputs_with_a_cpu_mask_match_torch():
    q, k, v = _qkv((2,), 5, 5, 4, 3, device="cuda")
    out, _ = scaled_dot_product_attention(q, k, v, mask=attnbook.causal_mask(5))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert out.is_cuda


@pytest.mark.parametrize("batch, mask_shape", [((), (5, 7)), ((3,), (3, 5, 7)), ((2, 4), (2, 1, 5, 7)),
                                               ((2, 4), (7,)), ((2, 4), (2, 4, 1, 7))])
def test_matches_torch_sdpa_with_broadcast_boolean_mask(batch, mask_shape):
    q, k, v = _qkv(batch, 5, 7, 8, 3)
    mask = _random_mask(mask_shape)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(*batch, 5, 7))  # torch wants >= 2-D
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert bool((w[~mask.expand_as(w)] == 0).all())  # masked weights are exactly 0
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
def test_scale_matches_torch(scale):
    q, k, v = _qkv((2,), 4, 6, 5, 2)
    out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_causal_mask_is_torch_is_causal(batch):
    q, k, v = _qkv(batch, 6, 6, 4, 4)
    out, w = scaled_dot_product_attention(q, k, v, mask=attnbook.causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-12, atol=1e-12)
    assert bool((w.triu(1) == 0).all())
    # the first query sees only the first key: its output is v_1 exactly
    torch.testing.assert_close(out[..., 0, :], v[..., 0, :], rtol=0, atol=1e-14)


def test_fully_masked_query_gives_zero_weights_and_output_and_no_nan_gradient():
    q, k, v = _qkv((2,), 4, 5, 3, 2, requires_grad=True)
    mask = _random_mask((2, 4, 5))
    mask[0, 2] = False  # query 2 of batch 0 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert bool((w[0, 2] == 0).all()) and bool((out[0, 2] == 0).all())
    assert not out.isnan().any() and not w.isnan().any()
    # the other rows are ordinary attention: compare with torch on them only
    ref = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), attn_mask=mask)
    keep = torch.ones(2, 4, dtype=torch.bool)
    keep[0, 2] = False
    torch.testing.assert_close(out.detach()[keep], ref[keep], rtol=1e-12, atol=1e-12)
    out.sum().backward()
    assert bool((q.grad[0, 2] == 0).all())
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def _autograd_grads(q, k, v, g, mask=None, scale=None):
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    return torch.autograd.grad(out, (q, k, v), g)


@pytest.mark.parametrize("case", ["plain", "mask", "empty-row", "scale", "broadcast-kv", "unbatched"])
def test_manual_backward_equals_autograd_float64(case):
    batch, kv_batch = (2, 3), (2, 3)
    if case == "broadcast-kv":
        kv_batch = (2, 1)  # k, v shared by the 3 "heads": their gradients sum over them
    if case == "unbatched":
        batch = kv_batch = ()
    q, _, _ = _qkv(batch, 4, 6, 5, 3, seed=0, requires_grad=True)
    _, k, v = _qkv(kv_batch, 4, 6, 5, 3, seed=1, requires_grad=True)
    mask, scale = None, None
    if case in ("mask", "empty-row"):
        mask = _random_mask((2, 3, 4, 6))
        if case == "empty-row":
            mask[1, 0, 3] = False
    if case == "scale":
        scale = 0.7
    g = torch.randn(*torch.broadcast_shapes(batch, kv_batch), 4, 3, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(5))
    manual = attention_backward(q.detach(), k.detach(), v.detach(), g, mask=mask, scale=scale)
    auto = _autograd_grads(q, k, v, g, mask, scale)
    for m, a, x in zip(manual, auto, (q, k, v)):
        assert m.shape == x.shape
        torch.testing.assert_close(m, a, rtol=1e-12, atol=1e-12)


def test_softmax_backward_is_a_jacobian_vector_product_not_a_hadamard_product():
    # dS = P ⊙ (dP − rowsum(dP ⊙ P)) equals J(p)^T dp row by row, with J from softmax_jacobian
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(4, 6, generator=g, dtype=torch.float64), -1)
    dp = torch.randn(4, 6, generator=g, dtype=torch.float64)
    jvp = (attnbook.softmax_jacobian(p).transpose(-2, -1) @ dp.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(p * (dp - (dp * p).sum(-1, keepdim=True)), jvp)
    # the diagonal-only (Hadamard) version misses the -p_i p_j terms
    assert (dp * p * (1 - p) - jvp).abs().max() > 1e-2


def test_autograd_function_passes_gradcheck_and_gradgradcheck():
    q, k, v = _qkv((2,), 3, 4, 3, 2, requires_grad=True, seed=7)
    mask = _random_mask((2, 3, 4), seed=8)
    mask[1, 1] = False  # include a fully masked query
    assert gradcheck(lambda a, b, c: manual_attention(a, b, c, mask), (q, k, v))
    assert gradgradcheck(lambda a, b, c: manual_attention(a, b, c, mask, 0.5), (q, k, v))
    out = manual_attention(q, k, v, mask)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, mask)[0], rtol=0, atol=0)


def test_self_attention_matches_multihead_attention_with_one_head():
    torch.manual_seed(0)
    d = 6
    layer = attnbook.SelfAttention(d).double()
    mha = torch.nn.MultiheadAttention(d, num_heads=1, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias]))
        mha.out_proj.weight.copy_(layer.out_proj.weight)
        mha.out_proj.bias.copy_(layer.out_proj.bias)
    x = torch.randn(3, 5, d, dtype=torch.float64)
    mask = attnbook.causal_mask(5)
    out, w = layer(x, mask=mask)
    ref, ref_w = mha(x, x, x, attn_mask=~mask)  # nn.MultiheadAttention: True = blocked
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    # unbatched input gives the first batch element
    torch.testing.assert_close(layer(x[0], mask)[0], out[0], rtol=1e-12, atol=1e-12)


def test_self_attention_sizes_and_manual_backward_through_the_layer():
    torch.manual_seed(1)
    layer = attnbook.SelfAttention(4, d_k=3, d_v=2, bias=False).double()
    assert layer.q_proj.weight.shape == (3, 4) and layer.v_proj.weight.shape == (2, 4)
    assert layer.out_proj.weight.shape == (4, 2) and layer.q_proj.bias is None
    x = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    out, _ = layer(x)
    grads = torch.autograd.grad(out.square().sum(), [x, *layer.parameters()])
    q, k, v = layer.q_proj(x), layer.k_proj(x), layer.v_proj(x)
    out2 = layer.out_proj(manual_attention(q, k, v))
    torch.testing.assert_close(out2, out, rtol=1e-12, atol=1e-12)
    grads2 = torch.autograd.grad(out2.square().sum(), [x, *layer.parameters()])
    for a, b in zip(grads, grads2):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_self_attention_is_permutation_equivariant_and_pooling_is_invariant():
    torch.manual_seed(2)
    layer = attnbook.SelfAttention(6).double()
    x = torch.randn(7, 6, dtype=torch.float64)
    perm = torch.randperm(7)
    out, w = layer(x)
    out_p, w_p = layer(x[perm])
    torch.testing.assert_close(out_p, out[perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_p, w[perm][:, perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out_p.mean(0), out.mean(0), rtol=1e-12, atol=1e-12)
    assert (out_p - out).abs().max() > 1e-3  # not invariant position by position


@pytest.mark.parametrize("args, message", [
    (((2, 4, 8), (2, 6, 5), (2, 6, 3)), r"q of shape \(2, 4, 8\) and k of shape \(2, 6, 5\) differ"),
    (((2, 4, 8), (2, 6, 8), (2, 5, 3)), r"k of shape \(2, 6, 8\) and v of shape \(2, 5, 3\)"),
    (((2, 4, 8), (3, 6, 8), (3, 6, 3)), r"do not broadcast"),
    (((8,), (6, 8), (6, 3)), r"q of shape \(8,\) needs at least 2"),
    (((4, 0), (6, 0), (6, 3)), r"need D >= 1"),
])
def test_bad_shapes_raise_value_error(args, message):
    q, k, v = (torch.randn(*s) for s in args)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("mask, message", [
    (torch.ones(4, 5, dtype=torch.bool), r"mask of shape \(4, 5\) does not broadcast to the scores' shape \(2, 4, 6\)"),
    (torch.ones(3, 4, 6, dtype=torch.bool), r"mask of shape \(3, 4, 6\) does not broadcast"),
    (torch.ones(1, 2, 4, 6, dtype=torch.bool), r"does not broadcast"),  # would add a dimension
    (torch.ones(4, 6), r"torch.bool"),
])
def test_bad_masks_raise_value_error(mask, message):
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, mask=mask)


def test_other_bad_inputs_raise_value_error():
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3)
    for scale in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="scale must be"):
            scaled_dot_product_attention(q, k, v, scale=scale)
    with pytest.raises(ValueError, match="share one dtype"):
        scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(ValueError, match="floating-point"):
        scaled_dot_product_attention(q.long(), k, v)
    with pytest.raises(ValueError, match=r"grad_output of shape \(4, 2\) must have the output's shape \(4, 3\)"):
        attention_backward(q, k, v, torch.randn(4, 2))
    with pytest.raises(ValueError, match=r"x of shape \(5, 3\) must be \(\.\.\., T, d_model=4\)"):
        attnbook.SelfAttention(4)(torch.randn(5, 3))
    with pytest.raises(ValueError, match="d_k must be a positive integer"):
        attnbook.SelfAttention(4, d_k=0)


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


@pytest.mark.parametrize("args, message", [
    (((2, 4, 8), (2, 6, 5), (2, 6, 3)), r"differ in their last dimension \(8 vs 5\)"),
    (((2, 4, 8), (2, 6, 8), (2, 5, 3)), r"different numbers of keys and values \(6 vs 5\)"),
    (((2, 4, 8), (3, 6, 8), (2, 6, 3)), r"do not broadcast"),  # only k's batch is off
    (((2, 4, 8), (2, 6, 8), (3, 6, 3)), r"do not broadcast"),  # only v's batch is off
    (((2, 4, 0), (2, 6, 0), (2, 6, 3)), r"need D >= 1"),
    (((4, 8), (0, 8), (0, 3)), r"Tk >= 1"),
])
def test_bad_shapes_name_the_sizes(args, message):
    q, k, v = (torch.randn(*s) for s in args)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v)


def test_bad_inputs_name_the_argument_and_type():
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3)
    for args, message in [((q.tolist(), k, v), "^q must be a torch.Tensor, got list"),
                          ((q, k.tolist(), v), "^k must be a torch.Tensor, got list"),
                          ((q, k, v.tolist()), "^v must be a torch.Tensor, got list"),
                          ((q, k, v.long()), "^v has dtype torch.int64")]:
        with pytest.raises(ValueError, match=message):
            scaled_dot_product_attention(*args)
    for mask, message in [(torch.ones(4, 6), r"\(True = may attend\), got torch.float32"),
                          ([[True] * 6] * 4, r"\(True = may attend\), got list")]:
        with pytest.raises(ValueError, match=message):
            scaled_dot_product_attention(q, k, v, mask=mask)
    with pytest.raises(ValueError, match="grad_output of shape list"):
        attention_backward(q, k, v, [[0.0] * 3] * 4)
    with pytest.raises(ValueError, match=r"^x of shape \(4,\)"):
        attnbook.SelfAttention(4)(torch.randn(4))
    with pytest.raises(ValueError, match=r"^x of shape list"):
        attnbook.SelfAttention(4)([[0.0] * 4])
    for kwargs, message in [({"d_model": 0}, "^d_model must be"), ({"d_model": True}, "^d_model must be"),
                            ({"d_model": 4, "d_v": 0}, "^d_v must be")]:
        with pytest.raises(ValueError, match=message):
            attnbook.SelfAttention(**kwargs)


@pytest.mark.parametrize("batch, kv_batch", [((2, 3), ()), ((2, 2), (2, 1)), ((3,), (1,))])
def test_manual_backward_sums_gradients_over_broadcast_batch_dims(batch, kv_batch):
    q, _, _ = _qkv(batch, 4, 6, 5, 3, seed=2, requires_grad=True)
    _, k, v = _qkv(kv_batch, 4, 6, 5, 3, seed=3, requires_grad=True)
    g = torch.randn(*batch, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    manual = attention_backward(q.detach(), k.detach(), v.detach(), g)
    for m, a in zip(manual, _autograd_grads(q, k, v, g)):
        assert m.shape == a.shape
        torch.testing.assert_close(m, a, rtol=1e-12, atol=1e-12)
    # grad_output in another dtype is cast to the output's dtype first.
    for m, a in zip(attention_backward(q.detach(), k.detach(), v.detach(), g.float()), manual):
        torch.testing.assert_close(m, a, rtol=1e-6, atol=1e-6)


def test_manual_attention_uses_the_given_scale_forward_and_backward():
    q, k, v = _qkv((2,), 3, 4, 3, 2, requires_grad=True, seed=9)
    mask = _random_mask((2, 3, 4), seed=10)
    out = manual_attention(q, k, v, mask, 0.5)
    ref, _ = scaled_dot_product_attention(q, k, v, mask, scale=0.5)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn(2, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_self_attention_without_bias_has_no_bias_anywhere_and_accepts_width_one():
    layer = attnbook.SelfAttention(4, d_k=3, d_v=2, bias=False)
    assert all(p.bias is None for p in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj))
    one = attnbook.SelfAttention(1)  # 1 is a valid width
    x = torch.randn(5, 1)
    out, w = one(x)
    p = torch.softmax(one.q_proj(x) @ one.k_proj(x).T, -1)  # scale 1/sqrt(1)
    torch.testing.assert_close(w, p)
    torch.testing.assert_close(out, one.out_proj(p @ one.v_proj(x)))


def test_inputs_on_different_devices_are_refused():
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="q, k, v must be on one device, got meta, cpu, cpu"):
        scaled_dot_product_attention(q.to("meta"), q, q)


def test_a_cpu_mask_follows_the_inputs_to_their_device():
    q = torch.randn(2, 5, 4, device="meta")  # meta stands in for CUDA: a CPU mask must be moved to it
    out, w = scaled_dot_product_attention(q, q, q, mask=attnbook.causal_mask(5))
    assert out.device.type == w.device.type == "meta"

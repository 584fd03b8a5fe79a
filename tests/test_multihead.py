"""MultiHeadAttention against torch.nn.MultiheadAttention (weights copied across) and F.scaled_dot_product_attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import attnbook
from attnbook import (GroupedQueryAttention, MultiHeadAttention, causal_mask, combine_masks, merge_heads, multihead_macs,
                      padding_mask, padding_to_attention_mask, split_heads)

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pair(d_model=16, num_heads=4, bias=True, seed=0, device="cpu"):
    """Our module and torch's, with the same weights: torch packs in_proj_weight = [W_q; W_k; W_v]."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, num_heads, bias=bias).to(device, F64)
    ref = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True).to(device, F64)
    state = {"in_proj_weight": torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]),
             "out_proj.weight": ours.w_o.weight}
    if bias:
        state["in_proj_bias"] = torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias])
        state["out_proj.bias"] = ours.w_o.bias
    ref.load_state_dict({k: v.detach().clone() for k, v in state.items()})
    return ours, ref


def inputs(b, tq, tk, d, device="cpu", seed=1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(b, tq, d, generator=g, dtype=F64).to(device)
    kv = torch.randn(b, tk, d, generator=g, dtype=F64).to(device)
    return q, kv


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch_per_head_and_averaged(device, bias):
    ours, ref = pair(bias=bias, device=device)
    x, _ = inputs(3, 7, 7, 16, device)
    out, w = ours(x, x, x)
    ref_out, ref_w = ref(x, x, x, average_attn_weights=False)        # (B, H, Tq, Tk)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    _, ref_mean = ref(x, x, x)                                        # torch's default: mean over heads
    torch.testing.assert_close(w.mean(1), ref_mean, rtol=1e-12, atol=1e-12)
    assert out.device.type == device and w.shape == (3, 4, 7, 7)


def test_self_attention_with_causal_mask_matches_torch():
    ours, ref = pair(d_model=24, num_heads=3)
    x, _ = inputs(2, 6, 6, 24)
    out, w = ours(x, x, x, causal_mask(6))
    ref_out, ref_w = ref(x, x, x, attn_mask=~causal_mask(6), average_attn_weights=False)  # torch: True = blocked
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    assert (w.triu(1) == 0).all()                                     # no weight on the future


def test_self_attention_with_causal_and_key_padding_matches_torch():
    ours, ref = pair()
    x, _ = inputs(3, 5, 5, 16)
    real = padding_mask([5, 3, 4])                                    # (B, T), True = real token
    mask = combine_masks(causal_mask(5), padding_to_attention_mask(real))  # (B, 1, T, T)
    out, w = ours(x, x, x, mask)
    ref_out, ref_w = ref(x, x, x, attn_mask=~causal_mask(5), key_padding_mask=~real, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    assert (w[1, :, :, 3:] == 0).all()                                # padded keys get exactly 0


@pytest.mark.parametrize("causal", [False, True])
def test_cross_attention_matches_torch(causal):
    ours, ref = pair(d_model=32, num_heads=8)
    q, kv = inputs(2, 4, 9, 32)                                       # Tq = 4 queries, Tk = 9 keys
    real = padding_mask([9, 6])
    mask = padding_to_attention_mask(real)                            # (B, 1, 1, Tk)
    blocked = None
    if causal:  # query i may see keys 0 .. 2i + 1 (a rectangular lower-triangular mask)
        allowed = torch.ones(4, 9, dtype=torch.bool).tril(diagonal=4)
        mask, blocked = combine_masks(allowed, mask), ~allowed
    out, w = ours(q, kv, kv, mask)
    ref_out, ref_w = ref(q, kv, kv, key_padding_mask=~real, attn_mask=blocked, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    assert w.shape == (2, 8, 4, 9)


def test_per_head_mask_matches_torch_3d_mask():
    """A (B, H, Tq, Tk) mask: torch takes it as (B * H, Tq, Tk)."""
    ours, ref = pair()
    x, _ = inputs(2, 5, 5, 16)
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(2, 4, 5, 5, generator=g) < 0.6
    mask |= torch.eye(5, dtype=torch.bool)                           # every query keeps one key
    out, w = ours(x, x, x, mask)
    ref_out, ref_w = ref(x, x, x, attn_mask=~mask.reshape(8, 5, 5), average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)


def test_gradients_match_torch():
    ours, ref = pair()
    x, _ = inputs(2, 6, 6, 16)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(2, 6, 16, dtype=F64, generator=torch.Generator().manual_seed(5))
    (ours(x1, x1, x1, causal_mask(6))[0] * g).sum().backward()
    (ref(x2, x2, x2, attn_mask=~causal_mask(6))[0] * g).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-10, atol=1e-12)
    w_in = torch.cat([ours.w_q.weight.grad, ours.w_k.weight.grad, ours.w_v.weight.grad])
    torch.testing.assert_close(w_in, ref.in_proj_weight.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.w_o.weight.grad, ref.out_proj.weight.grad, rtol=1e-10, atol=1e-12)


def test_each_head_is_sdpa_on_its_slice_of_the_projections():
    """head i = softmax(Q_i K_i^T / sqrt(Dh)) V_i with Q_i = columns i*Dh .. (i+1)*Dh - 1 of X W^Q."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).double()
    q, kv = inputs(2, 4, 5, 12)
    out, _ = mha(q, kv, kv)
    Q, K, V = mha.w_q(q), mha.w_k(kv), mha.w_v(kv)                    # (B, T, 12)
    heads = [F.scaled_dot_product_attention(Q[..., i * 4:(i + 1) * 4], K[..., i * 4:(i + 1) * 4],
                                            V[..., i * 4:(i + 1) * 4]) for i in range(3)]
    torch.testing.assert_close(out, mha.w_o(torch.cat(heads, -1)), rtol=1e-12, atol=1e-12)


def test_split_and_merge_heads():
    x = torch.arange(2 * 3 * 8, dtype=F64).reshape(2, 3, 8)
    s = split_heads(x, 4)                                             # (2, 4, 3, 2)
    assert torch.equal(s[1, 2, 0], x[1, 0, 4:6])                      # head 2 = features 4, 5
    assert torch.equal(merge_heads(s), x)
    with pytest.raises(ValueError, match="divisible by num_heads=3"):
        split_heads(x, 3)
    with pytest.raises(ValueError, match=r"\(B, H, T, Dh\)"):
        merge_heads(x)


def test_fully_masked_query_gets_zero_weights_and_the_output_bias():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).double()
    x, _ = inputs(1, 3, 3, 8)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    out, w = mha(x, x, x, mask)
    assert torch.isfinite(out).all()
    assert (w[0, :, 1] == 0).all()
    torch.testing.assert_close(out[0, 1], mha.w_o.bias.detach())


def test_dropout_acts_on_weights_in_training_only():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.5).double()
    x, _ = inputs(2, 6, 6, 16)
    mha.eval()
    out_eval, w_eval = mha(x, x, x)
    plain = MultiHeadAttention(16, 4).double()
    plain.load_state_dict(mha.state_dict())
    torch.testing.assert_close(out_eval, plain(x, x, x)[0], rtol=0, atol=0)
    mha.train()
    torch.manual_seed(1)
    out_train, w_train = mha(x, x, x)
    torch.testing.assert_close(w_train, w_eval)                       # returned weights: before dropout
    torch.manual_seed(1)                                              # the same dropout mask, by hand
    dropped = F.dropout(w_eval, 0.5, training=True)
    v = split_heads(mha.w_v(x), 4)
    torch.testing.assert_close(out_train, mha.w_o(merge_heads(dropped @ v)), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(out_train, out_eval)


def test_cost_does_not_depend_on_the_number_of_heads():
    """multihead_macs against torch's FLOP counter (2 FLOPs per multiply-accumulate), for H = 1, 2, 4, 8."""
    x, kv = inputs(1, 10, 14, 32)
    totals = set()
    for h in (1, 2, 4, 8):
        mha = MultiHeadAttention(32, h).double()
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            mha(x, kv, kv)
        macs = multihead_macs(10, 14, 32, h)
        assert counter.get_total_flops() == 2 * macs["total"]
        totals.add(macs["total"])
    assert totals == {10 * 32 * 32 + 2 * 14 * 32 * 32 + 2 * 10 * 14 * 32 + 10 * 32 * 32}


def test_bad_inputs_raise_value_errors_naming_the_problem():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by num_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="dropout must be a number in"):
        MultiHeadAttention(8, 2, dropout=1.0)
    with pytest.raises(ValueError, match="not divisible"):
        multihead_macs(4, 4, 10, 3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"query of shape \(2, 5, 7\)"):
        mha(torch.randn(2, 5, 7), x, x)
    with pytest.raises(ValueError, match=r"query of shape \(5, 8\)"):
        mha(torch.randn(5, 8), x, x)
    with pytest.raises(ValueError, match="must have one shape"):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match="differ in batch size"):
        mha(torch.randn(3, 5, 8), x, x)
    with pytest.raises(ValueError, match="3-D mask of shape .* is ambiguous"):
        mha(x, x, x, torch.ones(2, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast"):
        mha(x, x, x, torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 5, 5\) does not broadcast"):
        mha(x, x, x, torch.ones(2, 3, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="torch.bool"):
        mha(x, x, x, torch.ones(5, 5))


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


@pytest.mark.parametrize("tq, tk, d, h", [(10, 14, 32, 4), (3, 5, 12, 3)])
def test_multihead_macs_terms_are_the_closed_forms(tq, tk, d, h):
    macs = multihead_macs(tq, tk, d, h)
    expected = {"projections": tq * d * d + 2 * tk * d * d, "scores": tq * tk * d, "weighted_sum": tq * tk * d,
                "output": tq * d * d}
    expected["total"] = sum(expected.values())
    assert macs == expected and all(type(v) is int for v in macs.values())


@pytest.mark.parametrize("args, message", [
    ((0, 4, 8, 2), "^tq must be a positive integer, got 0"), ((4, 0, 8, 2), "^tk must be"),
    ((4, 4, -8, 2), "^d_model must be"), ((4, 4, 8, True), "^num_heads must be a positive integer, got True"),
])
def test_multihead_macs_bad_arguments_name_themselves(args, message):
    with pytest.raises(ValueError, match=message):
        multihead_macs(*args)


def test_bad_masks_are_refused_by_the_layer_itself():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    # The layer's own message (naming (B, H, Tq, Tk)), not the one attention would give later.
    for mask in (torch.ones(4, 4, dtype=torch.bool), torch.ones(5, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"\(B, H, Tq, Tk\) = \(2, 2, 5, 5\); pass \(Tq, Tk\)"):
            mha(x, x, x, mask)
    for mask, got in [(torch.ones(5, 5), "torch.float32"), ([[True] * 5] * 5, "list")]:
        with pytest.raises(ValueError, match=r"\(True = may attend\), got " + got):
            mha(x, x, x, mask)


def test_repeat_kv_refuses_bad_arguments_naming_them():
    from attnbook.multihead import repeat_kv

    for x, shape in [(torch.zeros(2, 3), r"\(2, 3\)"), ([[0.0]], r"\(\)")]:
        with pytest.raises(ValueError, match=rf"^x of shape {shape} must be \(B, Hkv, T, Dh\)"):
            repeat_kv(x, 2)
    for n_rep in (0, True, 1.0):
        with pytest.raises(ValueError, match=f"^n_rep must be a positive integer, got {n_rep!r}"):
            repeat_kv(torch.zeros(1, 2, 3, 4), n_rep)


def test_layer_arguments_are_checked_and_named():
    for args, kwargs, message in [((0, 2), {}, "^d_model must be a positive integer"),
                                  ((8, True), {}, "^num_heads must be a positive integer, got True"),
                                  ((8, 2), {"dropout": False}, "^dropout must be a number in"),
                                  ((8, 2), {"rope_base": 1}, "^rope_base must be a number > 1")]:
        with pytest.raises(ValueError, match=message):
            GroupedQueryAttention(*args, **kwargs)
    with pytest.raises(TypeError):                               # the teaching layer has no GQA / RoPE settings
        MultiHeadAttention(8, 2, num_kv_heads=1)
    mha = GroupedQueryAttention(8, 2, bias=False, rope_base=1.5)  # any base > 1 is a valid RoPE base
    assert all(w.bias is None for w in (mha.w_q, mha.w_k, mha.w_v, mha.w_o))
    x = torch.randn(2, 5, 8)
    for args, message in [((x, x[..., :7], x), r"^key of shape \(2, 5, 7\)"),
                          ((x, x, x[..., :7]), r"^value of shape \(2, 5, 7\)"),
                          ((x.tolist(), x, x), "^query of shape list")]:
        with pytest.raises(ValueError, match=message):
            mha(*args)
    for bad, message in [(x[0], r"^x of shape \(5, 8\) must be \(B, Tn, d_model=8\)"),
                         (x.tolist(), "^x of shape list")]:
        with pytest.raises(ValueError, match=message):
            mha.attend_cached(bad, attnbook.KVCache())


def test_rotary_layer_uses_its_own_base():
    # Reference: the projections rotated by attnbook.apply_rotary with the layer's base, then attention.
    torch.manual_seed(3)
    mha = GroupedQueryAttention(8, 2, rope_base=100.0).double()
    x = torch.randn(2, 5, 8, dtype=F64)
    pos = torch.arange(5)
    q = attnbook.apply_rotary(split_heads(mha.w_q(x), 2), pos, base=100.0)
    k = attnbook.apply_rotary(split_heads(mha.w_k(x), 2), pos, base=100.0)
    heads = F.scaled_dot_product_attention(q, k, split_heads(mha.w_v(x), 2), attn_mask=causal_mask(5))
    torch.testing.assert_close(mha(x, x, x, causal_mask(5))[0], mha.w_o(merge_heads(heads)))


def test_rotary_and_cached_attention_stay_on_the_inputs_device():
    mha = GroupedQueryAttention(8, 2, rope_base=100.0, num_kv_heads=1).to("meta")  # meta stands in for CUDA
    x = torch.randn(2, 5, 8, device="meta")
    assert mha(x, x, x)[0].device.type == "meta"
    assert mha.attend_cached(x, attnbook.KVCache())[0].device.type == "meta"


def test_extra_repr_names_the_optional_settings():
    assert MultiHeadAttention(8, 2).extra_repr() == "d_model=8, num_heads=2, d_head=4"
    assert (GroupedQueryAttention(8, 2, num_kv_heads=1, rope_base=100.0).extra_repr()
            == "d_model=8, num_heads=2, d_head=4, num_kv_heads=1, rope_base=100")

"""Issue 49 (cold read 2026-11-29): the false accepts and wrong diagnoses the readers found, and the correct
variants they wrote, each as a test. Every wrong function here passed (or was misnamed) before the fix."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnbook
from attnbook import exercises


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _check(name, fn):
    result = exercises.check(name, fn)
    assert result.message, name
    return result


# ---------------------------------------------------------------- in-place edits of the inputs
def masked_softmax_inplace(scores, mask):
    scores.masked_fill_(~mask.expand_as(scores), float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def top_p_inplace(logits, p):
    probs = torch.softmax(logits.float(), -1)
    sp, idx = probs.sort(-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    thr = torch.where(keep, probs, torch.ones_like(probs)).amin(-1, keepdim=True)
    logits.copy_(logits.masked_fill(probs < thr, float("-inf")))
    return logits


def layer_norm_inplace(x, weight, bias, eps=1e-5):
    x.sub_(x.mean(-1, keepdim=True))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


def apply_rotary_inplace(x, positions):
    d = x.size(-1)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.to(torch.float64)[:, None] * omega
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
    x.copy_(out.to(x.dtype))
    return x


@pytest.mark.parametrize("name, fn, arg", [
    ("masked_softmax", masked_softmax_inplace, "scores"), ("top_p_filter", top_p_inplace, "logits"),
    ("layer_norm", layer_norm_inplace, "x"), ("apply_rotary", apply_rotary_inplace, "x")])
def test_a_function_that_edits_its_input_in_place_fails_naming_the_argument(name, fn, arg):
    result = _check(name, fn)
    assert not result.passed and result.mistake == "in_place", result.message
    assert f"改动了输入 {arg}" in result.message


# ---------------------------------------------------------------- values no case reached before
def masked_softmax_fill_1e4(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e4), -1) * mask


def test_a_fill_constant_fails_when_kept_scores_lie_below_it():
    result = _check("masked_softmax", masked_softmax_fill_1e4)
    assert not result.passed and result.mistake == "fill_constant", result.message
    assert "保留的分数比任何填充常数都小" in result.message


def top_p_hf_boundary(logits, p):
    probs = torch.softmax(logits.float(), -1)
    sp, idx = probs.sort(-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) <= p          # the book: < p
    keep_sorted[..., 0] = True
    thr = torch.where(keep_sorted, sp, torch.full_like(sp, float("inf"))).amin(-1, keepdim=True)
    return logits.masked_fill(probs < thr, float("-inf"))


def test_top_p_hugging_face_boundary_fails_on_the_exact_boundary():
    result = _check("top_p_filter", top_p_hf_boundary)
    assert not result.passed and result.mistake == "hf_boundary", result.message
    assert "累计概率恰好等于 p" in result.message
    kept = torch.isfinite(attnbook.top_p_filter(torch.log(torch.tensor([0.6, 0.3, 0.1])), 0.9))
    assert kept.tolist() == [True, True, False]      # the book keeps 2 of [0.6, 0.3, 0.1] at p = 0.9


def cosine_nearest_no_guard(query, vectors, k):
    cos = (vectors @ query) / (vectors.norm(dim=-1) * query.norm())
    return cos.argsort(descending=True, stable=True)[:k]


def test_cosine_without_a_zero_guard_fails_on_a_zero_vector():
    result = _check("cosine_nearest", cosine_nearest_no_guard)
    assert not result.passed and result.mistake == "no_zero_guard", result.message
    assert "有一行是零向量" in result.message


def online_softmax_global_max(x, block_size):
    m = x.amax(-1, keepdim=True)                      # one max over the whole row: not online
    l = sum(torch.exp(b - m).sum(-1, keepdim=True) for b in x.split(block_size, -1))
    return torch.exp(x - m) / l


def online_softmax_calls_softmax(x, block_size):
    return torch.softmax(x, -1)


def test_an_online_softmax_that_is_not_online_fails():
    result = _check("online_softmax", online_softmax_global_max)
    assert not result.passed and result.mistake == "forbidden", result.message
    assert "没有按块读取" in result.message
    result = _check("online_softmax", online_softmax_calls_softmax)
    assert not result.passed and "调用了 torch.softmax" in result.message, result.message


def masked_softmax_calls_the_book(scores, mask):
    import attnbook
    return attnbook.masked_softmax(scores, mask)


def stable_softmax_calls_torch(z, dim=-1):
    return F.softmax(z, dim=dim)


def test_calling_the_forbidden_function_fails():
    result = _check("masked_softmax", masked_softmax_calls_the_book)
    assert not result.passed and "调用了 attnbook.masked_softmax" in result.message, result.message
    result = _check("stable_softmax", stable_softmax_calls_torch)
    assert not result.passed and "调用了 torch.softmax" in result.message, result.message


# ---------------------------------------------------------------- diagnoses
def residual_without_guard(p, q):
    r = torch.clamp(p - q, min=0)
    return r / r.sum()


def test_a_residual_without_the_p_equals_q_guard_is_not_called_absolute():
    result = _check("speculative_residual", residual_without_guard)
    assert not result.passed and result.mistake == "no_empty_case", result.message
    assert "|p − q|" not in result.message


def top_p_no_ties_no_unsort(logits, p):
    probs = torch.softmax(logits.float(), -1)
    sp, idx = probs.sort(-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) < p
    return logits.masked_fill(~keep_sorted, float("-inf"))    # sorted order, never put back; ties dropped


def test_every_mistake_the_failing_cases_show_is_named():
    result = _check("top_p_filter", top_p_no_ties_no_unsort)
    assert not result.passed and result.mistake == "no_unsort", result.message
    assert "没有换回原来的顺序" in result.message and "并列" in result.message, result.message


def next_token_loss_no_reshape(logits, tokens):
    return F.cross_entropy(logits[:, :-1], tokens[:, 1:])


def test_a_crash_inside_torch_is_located_at_the_readers_line():
    result = _check("next_token_loss", next_token_loss_no_reshape)
    assert not result.passed
    assert "test_exercises_trust.py 第" in result.message and "F.cross_entropy(logits[:, :-1]" in result.message, \
        result.message
    assert "3555" not in result.message and "functional.py" not in result.message


# ---------------------------------------------------------------- correct variants (no false reject)
def masked_softmax_fp32_inside(scores, mask):
    s = scores.float().masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0).to(scores.dtype)


def stable_softmax_fp16_throughout(z, dim=-1):
    e = torch.exp(z - z.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def sdpa_einsum(q, k, v, mask=None):
    s = torch.einsum("...id,...jd->...ij", q * q.size(-1) ** -0.5, k)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return torch.einsum("...ij,...jd->...id", torch.softmax(s, -1).nan_to_num(0.0), v)


def rotary_complex(x, positions):
    d = x.size(-1)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * omega)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)


def rotary_fp32(x, positions):
    d = x.size(-1)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = positions.float()[:, None] * omega
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1).flatten(-2).to(x.dtype)


def layer_norm_rsqrt(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * weight + bias


def layer_norm_fp64(x, weight, bias, eps=1e-5):
    y = x.double()
    y = (y - y.mean(-1, keepdim=True)) / torch.sqrt(y.var(-1, unbiased=False, keepdim=True) + eps)
    return (y * weight.double() + bias.double()).to(x.dtype)


def top_p_fp64(logits, p):
    probs = torch.softmax(logits.double(), -1)
    sp, idx = probs.sort(-1, descending=True)
    m = ((sp.cumsum(-1) - sp) < p).sum(-1, keepdim=True)
    return logits.masked_fill(probs < sp.gather(-1, m - 1), float("-inf"))


def cosine_rows_only(query, vectors, k):
    v = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (v @ query).argsort(descending=True, stable=True)[:k]


def online_softmax_first_block(x, block_size):
    blocks = x.split(block_size, -1)
    m = blocks[0].amax(-1, keepdim=True)
    l = torch.exp(blocks[0] - m).sum(-1, keepdim=True)
    for b in blocks[1:]:
        m_new = torch.maximum(m, b.amax(-1, keepdim=True))
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l


def residual_equal_guard(p, q):
    if torch.equal(p, q):
        return p.clone()
    r = torch.relu(p - q)
    return r / r.sum()


@pytest.mark.parametrize("name, fn", [
    ("masked_softmax", masked_softmax_fp32_inside), ("stable_softmax", stable_softmax_fp16_throughout),
    ("scaled_dot_product_attention", sdpa_einsum), ("apply_rotary", rotary_complex), ("apply_rotary", rotary_fp32),
    ("layer_norm", layer_norm_rsqrt), ("layer_norm", layer_norm_fp64), ("top_p_filter", top_p_fp64),
    ("cosine_nearest", cosine_rows_only), ("online_softmax", online_softmax_first_block),
    ("speculative_residual", residual_equal_guard)])
def test_correct_variants_still_pass(name, fn):
    result = _check(name, fn)
    assert result.passed, result.message


# ---------------------------------------------------------------- diagnoses the chapter readers missed
def layer_norm_over_positions(x, weight, bias, eps=1e-5):
    mu = x.mean(-2, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-2, unbiased=False, keepdim=True) + eps) * weight + bias


def smoothing_not_a_distribution(logits, target, smoothing):
    v = logits.size(-1)
    onehot = F.one_hot(target, v).to(logits.dtype)
    q = (1 - smoothing) * onehot + smoothing / v * (1 - onehot)
    return -(q * torch.log_softmax(logits, -1)).sum(-1).mean()


@pytest.mark.parametrize("name, fn, key", [("layer_norm", layer_norm_over_positions, "positions"),
                                           ("label_smoothed_cross_entropy", smoothing_not_a_distribution,
                                            "not_distribution")])
def test_readers_wrong_versions_are_named(name, fn, key):
    result = _check(name, fn)
    assert not result.passed and result.mistake == key, result.message


def test_long_inputs_are_shown_by_shape():
    def mha_scale_d(x, w_q, w_k, w_v, w_o, num_heads):
        return x @ w_v @ w_o * 2.0
    result = _check("multihead_attention", mha_scale_d)
    line = next(s for s in result.message.splitlines() if s.strip().startswith("输入"))
    assert not result.passed and len(line) < 400, line

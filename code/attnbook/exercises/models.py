"""Exercises of the Transformer and GPT chapters: LayerNorm, label smoothing, a KV-cache decode step,
the shifted next-token loss, top-p filtering."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention as _book_sdpa
from ..masks import causal_mask as _book_causal
from ..sampling import top_p_filter as _book_top_p
from ..softmax import cross_entropy as _book_cross_entropy
from ..train import label_smoothed_cross_entropy as _book_smoothed
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import generator as _generator
from ._cases import randn as _randn
from ._watch import forbid


def _randint(high, *shape, seed=0):
    return torch.randint(high, shape, generator=_generator(seed))


# ---------------------------------------------------------------- layer_norm
LAYER_NORM = Exercise(
    "layer_norm", "layer_norm(x, weight, bias, eps=1e-5) -> Tensor", "transformer",
    ("一行四个数", "批量、随机的 weight 与 bias", "一行全是同一个数", "方差很小的一行", "均值很大（1e4）的输入"),
    "残差连接与层归一化：post-LN 与 pre-LN",
    "沿最后一维归一化：(x − 均值) / √(有偏方差 + eps) · weight + bias，与 torch.nn.functional.layer_norm 相同。")


def _ln_ref(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, (x.size(-1),), weight, bias, eps)


def _ln_variant(unbiased=False, eps_outside=False, dims=(-1,), affine=True, one_pass=False):
    def f(x, weight, bias, eps=1e-5):
        mu = x.mean(dims, keepdim=True)
        if one_pass:
            var = (x * x).mean(dims, keepdim=True) - mu * mu
        else:
            var = x.var(dims, unbiased=unbiased, keepdim=True)
        y = (x - mu) / (var.sqrt() + eps if eps_outside else torch.sqrt(var + eps))
        return y * weight + bias if affine else y
    return f


def _check_ln(fn):
    t = torch.tensor
    cases = [
        Case("一行四个数", (t([[1.0, 2.0, 3.0, 4.0]]), torch.ones(4), torch.zeros(4))),
        Case("批量、随机的 weight 与 bias", (_randn(2, 3, 5, scale=3.0), _randn(5, seed=1), _randn(5, seed=2))),
        Case("一行全是同一个数", (t([[2.0, 2.0, 2.0], [1.0, 2.0, 6.0]]), t([1.0, 2.0, 3.0]), t([0.5, 0.0, -0.5]))),
        Case("方差很小的一行", (t([[1.0, 1.001, 1.002, 1.003]]), torch.ones(4), torch.zeros(4)), atol=1e-4, rtol=1e-3),
        Case("均值很大（1e4）的输入", (_randn(2, 8, seed=3) + 1e4, torch.ones(8), torch.zeros(8)), atol=2e-3, rtol=1e-3),
    ]
    mistakes = [
        Mistake("unbiased", "用了无偏方差（除以 D − 1）：层归一化用有偏方差（除以 D）", _ln_variant(unbiased=True),
                "torch.var 默认 unbiased=True；写成 x.var(-1, unbiased=False)，或 ((x - μ)²).mean(-1)。"),
        Mistake("eps_outside", "eps 加在了根号外面：应当是 √(方差 + eps)", _ln_variant(eps_outside=True), ""),
        Mistake("wrong_dims", "在 (T, D) 整块上求均值和方差：层归一化只沿最后一维（每个位置各自归一化）",
                _ln_variant(dims=(-2, -1)), ""),
        Mistake("positions", "沿位置（dim=−2）做了归一化：层归一化对每个位置沿特征维（最后一维）各自归一化",
                _ln_variant(dims=(-2,)), "mean 与 var 都用 dim=−1（keepdim=True）。"),
        Mistake("no_affine", "没有乘 weight、加 bias", _ln_variant(affine=False), ""),
        Mistake("one_pass", "用 E[x²] − E[x]² 算方差：均值大时两项几乎相消，float32 的舍入误差淹没了方差",
                _ln_variant(one_pass=True), "先减去均值再平方：((x − μ)²).mean(-1)。"),
    ]
    return run_cases(fn, _ln_ref, cases, mistakes, LAYER_NORM.where, ("x", "weight", "bias"),
                     watch=forbid(ops=("layer_norm",)))


register(LAYER_NORM, _check_ln)

# ---------------------------------------------------------------- label_smoothed_cross_entropy
SMOOTH = Exercise(
    "label_smoothed_cross_entropy", "label_smoothed_cross_entropy(logits, target, smoothing) -> Tensor ()", "transformer",
    ("一个样本、三个类", "smoothing = 0", "随机批量", "很大的 logits"),
    "训练：教师强制、标签平滑、预热与裁剪",
    "目标分布 (1 − ε)·onehot(y) + ε/V（ε 平均分给全部 V 个类，含正确类）下的交叉熵，对 N 个样本取平均；"
    "与 torch.nn.functional.cross_entropy(..., label_smoothing=ε) 相同。logits (N, V)，target (N,)。")


def _smooth_variant(convention="all", uniform=True, reduction="mean", naive=False):
    def f(logits, target, smoothing):
        logp = torch.log(torch.softmax(logits, -1)) if naive else torch.log_softmax(logits, -1)
        v = logits.size(-1)
        onehot = F.one_hot(target, v).to(logp.dtype)
        if convention == "others":
            q = (1 - smoothing) * onehot + smoothing / (v - 1) * (1 - onehot)
        elif convention == "not_distribution":
            q = (1 - smoothing) * onehot + smoothing / v * (1 - onehot)
        else:
            q = (1 - smoothing) * onehot + (smoothing / v if uniform else 0.0)
        loss = -(q * logp).sum(-1)
        return loss.sum() if reduction == "sum" else loss.mean()
    return f


def _check_smooth(fn):
    t = torch.tensor
    cases = [
        Case("一个样本、三个类", (t([[2.0, 0.0, -1.0]]), t([0]), 0.1)),
        Case("smoothing = 0", (_randn(3, 4), t([1, 0, 3]), 0.0)),
        Case("随机批量", (_randn(6, 7, seed=1, scale=2.0), _randint(7, 6, seed=2), 0.2)),
        Case("很大的 logits", (t([[200.0, 0.0, -200.0], [0.0, 300.0, 1.0]]), t([0, 2]), 0.1)),
    ]
    mistakes = [
        Mistake("others", "ε 只分给了其余 V − 1 个类：本书（与 PyTorch）把 ε/V 分给全部 V 个类，正确类也有一份",
                _smooth_variant(convention="others"), "两种约定都有人用；这里按 F.cross_entropy(label_smoothing=) 的约定。"),
        Mistake("not_distribution", "正确类给了 1 − ε、其余每类 ε/V：目标分布的和是 1 − ε/V，不是 1",
                _smooth_variant(convention="not_distribution"), "正确类是 (1 − ε) + ε/V：ε/V 分给全部 V 个类，也包括正确类。"),
        Mistake("no_uniform", "只把正确类的权重乘了 (1 − ε)，没有加上 ε/V 的均匀部分", _smooth_variant(uniform=False), ""),
        Mistake("sum", "对样本求了和，应当取平均", _smooth_variant(reduction="sum"), ""),
        Mistake("naive_log", "先 softmax 再 log：概率下溢成 0 时 log 0 = −inf", _smooth_variant(naive=True),
                "用 log_softmax（对数域一步算出），不要 log(softmax(z))。", "《Softmax 函数详解》§对数域：`log_softmax` 与 `logsumexp`"),
    ]
    return run_cases(fn, _book_smoothed, cases, mistakes, SMOOTH.where, ("logits", "target", "smoothing"),
                     watch=forbid(_book_smoothed))


register(SMOOTH, _check_smooth)

# ---------------------------------------------------------------- kv_cache_step
KV_STEP = Exercise(
    "kv_cache_step", "kv_cache_step(q, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)", "transformer",
    ("空缓存（第一个词元）", "缓存里有两个词元", "批量、d_v ≠ d_k"),
    "KV 缓存：每一步只算新的词元",
    "解码一步：把新词元的键、值接到缓存末尾，新查询对缓存里的全部键（含自己）做缩放点积注意力；"
    "q、k_new (B, 1, d_k)，v_new (B, 1, d_v)，缓存 (B, t, ·)，t 可以是 0。")


def _kv_ref(q, k_new, v_new, k_cache, v_cache):
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    return _book_sdpa(q, k, v)[0], k, v


def _kv_variant(order="append", attend_first=False, scale=True, causal_row=False):
    def f(q, k_new, v_new, k_cache, v_cache):
        cat = (lambda a, b: torch.cat([a, b], 1)) if order == "append" else (lambda a, b: torch.cat([b, a], 1))
        k, v = cat(k_cache, k_new), cat(v_cache, v_new)
        kk, vv = (k_cache, v_cache) if attend_first else (k, v)
        s = q @ kk.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
        if causal_row:
            s = s.masked_fill(~_book_causal(kk.size(1))[:1], float("-inf"))
        return torch.softmax(s, -1) @ vv, k, v
    return f


def _check_kv(fn):
    t = torch.tensor
    cases = [
        Case("空缓存（第一个词元）", (t([[[1.0, 0.0]]]), t([[[0.5, 0.5]]]), t([[[2.0]]]), torch.zeros(1, 0, 2), torch.zeros(1, 0, 1))),
        Case("缓存里有两个词元", (t([[[1.0, 0.0]]]), t([[[0.0, 1.0]]]), t([[[3.0]]]), t([[[1.0, 1.0], [2.0, 0.0]]]),
                                 t([[[1.0], [2.0]]]))),
        Case("批量、d_v ≠ d_k", (_randn(2, 1, 4), _randn(2, 1, 4, seed=1), _randn(2, 1, 3, seed=2), _randn(2, 5, 4, seed=3),
                                _randn(2, 5, 3, seed=4))),
    ]
    mistakes = [
        Mistake("attend_before_append", "先用旧缓存做注意力、后追加新词元：新词元没有看见自己",
                _kv_variant(attend_first=True), "新词元的键、值要先进缓存，它的查询才能注意到自己（因果掩码的对角线）。"),
        Mistake("prepend", "新词元接在了缓存的最前面：缓存应当按位置顺序排列", _kv_variant(order="prepend"),
                "输出恰好不受键的顺序影响，但缓存的顺序错了，后面的 RoPE、滑动窗口与裁剪都会出错。"),
        Mistake("no_scale", "少了 √d_k", _kv_variant(scale=False), "", "《缩放点积注意力与自注意力》§为什么要除以 √d_k"),
        Mistake("causal_first_row", "用了因果掩码的第一行：新词元只看见了第一个键",
                _kv_variant(causal_row=True), "解码时新词元是最后一个位置，它能看见缓存里的全部键，不需要掩码。"),
    ]
    return run_cases(fn, _kv_ref, cases, mistakes, KV_STEP.where, ("q", "k_new", "v_new", "k_cache", "v_cache"))


register(KV_STEP, _check_kv)

# ---------------------------------------------------------------- next_token_loss
NEXT = Exercise(
    "next_token_loss", "next_token_loss(logits, tokens) -> Tensor ()", "gpt",
    ("B = 1、T = 3、V = 4", "随机批量", "T = 2", "很大的 logits"),
    "错开一位的目标",
    "位置 t 的 logits 预测第 t + 1 个词元：对 logits[:, :-1] 与 tokens[:, 1:] 的交叉熵取平均；logits (B, T, V)，tokens (B, T)。")


def _next_ref(logits, tokens):
    return _book_cross_entropy(logits[:, :-1], tokens[:, 1:])


def _check_next(fn):
    t = torch.tensor
    cases = [
        Case("B = 1、T = 3、V = 4", (t([[[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 0.0]]]), t([[0, 2, 1]]))),
        Case("随机批量", (_randn(2, 6, 10), _randint(10, 2, 6, seed=1))),
        Case("T = 2", (_randn(3, 2, 5, seed=2), _randint(5, 3, 2, seed=3))),
        Case("很大的 logits", (_randn(2, 4, 6, seed=4, scale=300.0), _randint(6, 2, 4, seed=5))),
    ]
    ce = lambda lg, y: F.cross_entropy(lg.reshape(-1, lg.size(-1)), y.reshape(-1))  # noqa: E731
    mistakes = [
        Mistake("no_shift", "没有错开：位置 t 的 logits 在“预测”它自己的输入 tokens[:, t]", lambda lg, y: ce(lg, y),
                "因果注意力让位置 t 看得见第 t 个词元，目标必须是下一个词元 tokens[:, t + 1]。"),
        Mistake("shift_backwards", "错开的方向反了：logits[:, 1:] 对 tokens[:, :-1]", lambda lg, y: ce(lg[:, 1:], y[:, :-1]), ""),
        Mistake("sum", "对位置求了和，应当取平均", lambda lg, y: F.cross_entropy(
            lg[:, :-1].reshape(-1, lg.size(-1)), y[:, 1:].reshape(-1), reduction="sum"), ""),
        Mistake("naive_log", "先 softmax 再 log：概率下溢成 0 时 log 0 = −inf",
                lambda lg, y: F.nll_loss(torch.log(torch.softmax(lg[:, :-1], -1)).reshape(-1, lg.size(-1)),
                                         y[:, 1:].reshape(-1)),
                "用 F.cross_entropy 或 log_softmax。", "《Softmax 函数详解》§Softmax 与交叉熵合二为一"),
    ]
    return run_cases(fn, _next_ref, cases, mistakes, NEXT.where, ("logits", "tokens"))


register(NEXT, _check_next)

# ---------------------------------------------------------------- top_p_filter
TOP_P = Exercise(
    "top_p_filter", "top_p_filter(logits, p) -> Tensor", "gpt",
    ("越过 p 的那个词元（未排序）", "累计概率恰好等于 p", "与最后一个保留的词元并列", "p = 1", "很小的 p", "随机批量（未排序）"),
    "采样：从分布里取下一个字",
    "按概率从大到小保留累计概率刚达到 p 的最小集合（越过 p 的那个词元也保留），与它概率相等的词元一并保留，其余设为 −inf。")


def _top_p_variant(keep_rule="crossing", ties=True, ascending=False, fill=float("-inf"), unsort=True):
    def f(logits, p):
        probs = torch.softmax(logits.float(), -1)
        sp, idx = probs.sort(-1, descending=not ascending)
        cum = sp.cumsum(-1)
        keep_sorted = {"strict": cum < p, "hf": cum - sp <= p}.get(keep_rule, cum - sp < p)
        keep_sorted[..., 0] = True
        if not unsort:                         # ties kept, but the mask stays in sorted order
            probs = sp
        keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted) if unsort else keep_sorted
        if ties:
            thr = torch.where(keep, probs, torch.ones_like(probs)).amin(-1, keepdim=True)
            keep = keep | (probs >= thr)
        return logits.masked_fill(~keep, fill)
    return f


def _drops_ties(args, kwargs, expected, got) -> bool:
    """got keeps a proper subset of the kept tokens, dropping only tokens tied with the least probable kept one."""
    logits = args[0]
    kept_e, kept_g = torch.isfinite(expected), torch.isfinite(got)
    if got.shape != expected.shape or (kept_g & ~kept_e).any() or bool((kept_g == kept_e).all()):
        return False
    if not torch.equal(got[kept_g], logits[kept_g]):
        return False
    probs = torch.softmax(logits.double(), -1)
    least = torch.where(kept_e, probs, torch.ones_like(probs)).amin(-1, keepdim=True).expand_as(probs)
    dropped = kept_e & ~kept_g
    if not torch.isclose(probs[dropped], least[dropped], rtol=1e-6, atol=0).all():
        return False
    # A tie was split: got keeps a token as probable as each one it dropped (else got dropped the crossing token).
    least_g = torch.where(kept_g, probs, torch.ones_like(probs)).amin(-1, keepdim=True).expand_as(probs)
    return bool(torch.isclose(probs[dropped], least_g[dropped], rtol=1e-6, atol=0).all())


def _check_top_p(fn):
    t = torch.tensor
    lg = lambda *ps: torch.log(t(ps))  # noqa: E731
    cases = [
        Case("越过 p 的那个词元（未排序）", (lg(0.2, 0.5, 0.3), 0.6)),
        Case("累计概率恰好等于 p", (lg(0.6, 0.3, 0.1), 0.9)),
        Case("累计概率恰好等于 p", (lg(0.125, 0.5, 0.125, 0.25), 0.75)),
        Case("与最后一个保留的词元并列", (lg(0.4, 0.2, 0.2, 0.2), 0.5)),
        Case("p = 1", (lg(0.7, 0.2, 0.1), 1.0)),
        Case("很小的 p", (lg(0.1, 0.6, 0.3), 0.05)),
        Case("随机批量（未排序）", (_randn(3, 10, scale=2.0), 0.9)),
    ]
    where = "《从 Transformer 到 GPT：仅解码器的语言模型》§采样：从分布里取下一个字"
    mistakes = [
        Mistake("drops_crossing", "丢掉了越过 p 的那个词元：只保留了累计概率严格小于 p 的词元",
                _top_p_variant(keep_rule="strict"),
                "top-p 保留累计概率刚达到 p 的最小集合，所以使累计概率越过 p 的那个词元也要保留。", where),
        Mistake("no_ties", "没有保留与最后一个词元并列的词元：保留哪些取决于排序怎样安排相等的值",
                None, "本书的规则：与最后保留的词元概率相等的都保留（Hugging Face 的 TopPLogitsWarper 只保留其中一部分）。",
                where, test=_drops_ties),
        Mistake("no_unsort", "在排好序的顺序里定了保留哪些，却没有换回原来的顺序：留下的是排序后的位置",
                _top_p_variant(unsort=False),
                "sort 返回的 indices 记着每个词元原来的位置；保留与否要按它放回（scatter），或者像本书那样用概率阈值直接比较。",
                where),
        Mistake("hf_boundary", "累计概率恰好等于 p 时多留了一个词元：用了“前面的累计概率 ≤ p”（Hugging Face 的规则）",
                _top_p_variant(keep_rule="hf"),
                "本书的规则是保留累计概率刚达到 p 的最小集合：前面的词元已经凑够 p，下一个就不再保留（前面的累计概率 < p 才保留）。",
                where),
        Mistake("ascending", "排序方向反了：从概率最小的词元开始累加", _top_p_variant(ascending=True), "", where),
        Mistake("zero_fill", "丢掉的词元设成了 0，应当是 −inf（Softmax 后概率为 0）", _top_p_variant(fill=0.0), "", where),
    ]
    return run_cases(fn, _book_top_p, cases, mistakes, TOP_P.where, ("logits", "p"),
                     watch=forbid(_book_top_p))


register(TOP_P, _check_top_p)

"""Exercises of the core computation: Softmax, masked Softmax, the causal mask, scaled dot-product attention."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention as _book_sdpa
from ..masks import causal_mask as _book_causal
from ..softmax import masked_softmax as _book_masked
from ..softmax import softmax as _book_softmax
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import generator as _generator
from ._cases import randn as _randn
from ._watch import forbid


# ---------------------------------------------------------------- stable_softmax
STABLE = Exercise(
    "stable_softmax", "stable_softmax(z, dim=-1) -> Tensor", "softmax",
    ("一行小分数", "上千的大分数", "各行尺度相差很远", "并列最大值", "dim=0", "T = 1", "float16", "随机的奇数大小"),
    "数值稳定性", "减去每一行（沿 dim）的最大值再取指数，大分数也不溢出。")


def _naive(z, dim=-1):
    e = torch.exp(z)
    return e / e.sum(dim, keepdim=True)


def _global_max(z, dim=-1):
    e = torch.exp(z - z.max())
    return e / e.sum(dim, keepdim=True)


def _last_dim_only(z, dim=-1):
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def _check_stable(fn):
    t = torch.tensor
    cases = [
        Case("一行小分数", (t([[1.0, 2.0, 3.0]]),)),
        Case("上千的大分数", (t([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]]),)),
        Case("各行尺度相差很远", (t([[1.0, 2.0, 3.0], [1000.0, 1000.0, 990.0]]),)),
        Case("并列最大值", (t([[2.0, 2.0, 1.0]]),)),
        Case("dim=0", (t([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]]),), {"dim": 0}),
        Case("T = 1", (t([[5.0], [-3.0]]),)),
        Case("float16", (t([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]], dtype=torch.float16),), atol=1e-3, rtol=1e-3),
        Case("随机的奇数大小", (_randn(2, 3, 5, scale=3.0),)),
        Case("随机的奇数大小", (_randn(3, 7, 5, seed=1, scale=30.0),), {"dim": 1}),
    ]
    mistakes = [
        Mistake("naive", "没有减去最大值：exp 溢出成 inf，inf/inf = nan", _naive,
                "exp(1000) 超出 float32 的范围。先减去每行的最大值，结果不变（分子分母同乘一个常数）。",
                "《Softmax 函数详解》§减去最大值"),
        Mistake("global_max", "减去了整个张量的最大值，而不是每一行的最大值", _global_max,
                "一行的分数比全局最大值小很多时，这一行的 exp 全部下溢成 0，0/0 = nan。应当沿 dim 取最大值（keepdim=True）。",
                "《Softmax 函数详解》§减去最大值"),
        Mistake("ignores_dim", "忽略了参数 dim，总是沿最后一维归一化", _last_dim_only,
                "max 和 sum 都应当沿 dim 计算。"),
    ]
    return run_cases(fn, lambda z, dim=-1: _book_softmax(z, dim), cases, mistakes, STABLE.where, ("z",),
                     watch=forbid(_book_softmax, ops=("softmax",)))


register(STABLE, _check_stable)

# ---------------------------------------------------------------- masked_softmax
MASKED = Exercise(
    "masked_softmax", "masked_softmax(scores, mask) -> Tensor", "softmax",
    ("屏蔽一个键", "整行都被屏蔽", "(B, 1, T) 的掩码广播", "保留的分数比任何填充常数都小", "被屏蔽的位置分数极大", "float16", "随机掩码（含空行）"),
    "掩码", "mask 为 True 的位置参与 Softmax，其余权重恰好为 0；一个键都不能看的行输出全 0。")


def _fill_inf(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def _fill_1e9(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def _mult_after(scores, mask):
    return torch.softmax(scores, dim=-1) * mask


def _fill_1e4_times_mask(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1) * mask


def _inverted(scores, mask):
    return _book_masked(scores, ~mask)


def _max_all(scores, mask):
    e = torch.exp(scores - scores.max(-1, keepdim=True).values) * mask
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def _check_masked(fn):
    t = torch.tensor
    T_, F_ = True, False
    g = _generator(3)
    rand_mask = torch.rand(3, 5, 7, generator=g) < 0.6
    rand_mask[0, 1] = False
    rand_mask[2, 4] = False
    cases = [
        Case("屏蔽一个键", (t([[1.0, 2.0, 3.0]]), t([[T_, T_, F_]]))),
        Case("整行都被屏蔽", (t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), t([[T_, T_, F_], [F_, F_, F_]]))),
        Case("(B, 1, T) 的掩码广播", (_randn(2, 3, 3, seed=1), t([[[T_, T_, F_]], [[T_, T_, T_]]]))),
        Case("保留的分数比任何填充常数都小", (t([[-20000.0, -19999.0, 0.0], [-3e9, -3e9, 0.0]]), t([[T_, T_, F_], [T_, T_, F_]]))),
        Case("被屏蔽的位置分数极大", (t([[1000.0, 1001.0, 2000.0]]), t([[T_, T_, F_]]))),
        Case("float16", (t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float16), t([[T_, F_, T_], [F_, F_, F_]])),
             atol=1e-3, rtol=1e-3,
             on_error="float16 放不下 -1e9（最大约 65504），masked_fill(-1e9) 在这里会报错。"),
        Case("随机掩码（含空行）", (_randn(3, 5, 7, seed=2, scale=3.0), rand_mask)),
    ]
    where_errors = "《Softmax 函数详解》§三种常见的错误做法"
    mistakes = [
        Mistake("fill_constant", "用一个有限的常数填充被屏蔽的位置：保留的分数比这个常数还小时，权重全给了被屏蔽的键",
                _fill_1e4_times_mask,
                "任何有限的常数都可能比保留下来的分数大（−1e4 对 −2e4）。只在保留的位置上取最大值、求和，不用填充常数。",
                where_errors),
        Mistake("fill_inf", "先用 -inf 填充被屏蔽的位置、再做 Softmax：整行都被屏蔽时得到 nan", _fill_inf,
                "整行都是 -inf 时，减去最大值算出 -inf - (-inf) = nan。应当只在保留的位置上求和，空行输出 0。",
                where_errors),
        Mistake("fill_1e9", "先用 -1e9 填充被屏蔽的位置、再做 Softmax：整行都被屏蔽时成了均匀分布", _fill_1e9,
                "整行都是 -1e9 时 Softmax 给每个位置 1/n，这个查询仍然“看”了被屏蔽的键。空行应当输出全 0。",
                where_errors),
        Mistake("multiply_after", "先做 Softmax、再乘以掩码，没有重新归一化", _mult_after,
                "被屏蔽的键仍然分走了概率，保留下来的权重之和小于 1。"),
        Mistake("inverted", "把掩码的含义弄反了：本书的掩码 True = 可以看", _inverted,
                "和 torch.nn.functional.scaled_dot_product_attention 一样，True 表示保留（可以注意）。"),
        Mistake("max_over_all", "减去的最大值包括了被屏蔽的位置", _max_all,
                "被屏蔽的位置分数极大时，保留位置的 exp 全部下溢成 0。最大值只应在保留的位置上取。"),
    ]
    return run_cases(fn, _book_masked, cases, mistakes, MASKED.where, ("scores", "mask"),
                     watch=forbid(_book_masked))


register(MASKED, _check_masked)

# ---------------------------------------------------------------- causal_mask
CAUSAL = Exercise(
    "causal_mask", "causal_mask(n) -> BoolTensor (n, n)", "scaled_attention",
    ("n = 3", "n = 1", "n = 5", "n = 8"),
    "计算流程：矩阵乘 → 缩放 → 掩码 → Softmax → 矩阵乘",
    "下三角（含对角线）为 True：查询 i 可以看键 j ≤ i。")


def _check_causal(fn):
    cases = [Case(f"n = {n}", (n,)) for n in (3, 1, 5, 8)]
    ones = lambda n: torch.ones(n, n, dtype=torch.bool)  # noqa: E731
    mistakes = [
        Mistake("no_diagonal", "因果掩码差了一位：对角线也被屏蔽了", lambda n: ones(n).tril(-1),
                "查询 i 应当能看见自己（j = i）；否则第一个位置什么都看不见。"),
        Mistake("sees_next", "因果掩码差了一位：还能看见下一个位置", lambda n: ones(n).tril(1),
                "模型训练时会偷看到要预测的下一个词元。"),
        Mistake("upper", "方向反了：用了上三角，查询看的是未来", lambda n: ones(n).triu(),
                "行是查询、列是键：查询 i 看的是 j ≤ i，即下三角。"),
        Mistake("inverted", "True 的含义反了：这是“要屏蔽”的掩码", lambda n: ones(n).triu(1),
                "本书的掩码 True = 可以看（与 PyTorch 的 scaled_dot_product_attention 相同）。",
                "《Softmax 函数详解》§填充掩码与因果掩码"),
        Mistake("float", "返回了 0/1 浮点矩阵，应当是布尔张量", lambda n: torch.ones(n, n).tril(),
                "用 dtype=torch.bool，或对浮点矩阵做比较（> 0）。"),
    ]
    return run_cases(fn, lambda n: _book_causal(n), cases, mistakes, CAUSAL.where, ("n",), watch=forbid(_book_causal))


register(CAUSAL, _check_causal)

# ---------------------------------------------------------------- scaled_dot_product_attention
SDPA = Exercise(
    "scaled_dot_product_attention", "scaled_dot_product_attention(q, k, v, mask=None) -> Tensor",
    "scaled_attention",
    ("一个查询、两个键", "批量、Tq ≠ Tk、d_v ≠ d_k", "因果掩码", "(B, 1, Tk) 的填充掩码", "T = 1", "多头形状 (B, H, T, d)",
     "整行都被屏蔽"),
    "计算流程：矩阵乘 → 缩放 → 掩码 → Softmax → 矩阵乘",
    "softmax(QKᵀ/√d_k)V，q、k、v 的形状 (..., T, d)；mask 为 True 的位置可以注意，空行输出 0。")


def _ref_sdpa(q, k, v, mask=None):
    return _book_sdpa(q, k, v, mask)[0]


def _sdpa_with(scale_fn=None, dim=-1, fill=None, ignore_mask=False):
    def f(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) * (scale_fn(q, v) if scale_fn else 1.0 / math.sqrt(q.size(-1)))
        if mask is not None and not ignore_mask:
            if fill is None:
                return _book_masked(s, mask, dim) @ v
            s = s.masked_fill(~mask, fill)
        return torch.softmax(s, dim=dim) @ v
    return f


def _check_sdpa(fn):
    t = torch.tensor
    T_, F_ = True, False
    q1 = t([[1.0, 0.0, 1.0, 0.0]])
    k1 = t([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    v1 = t([[1.0, 2.0], [3.0, 4.0]])
    cases = [
        Case("一个查询、两个键", (q1, k1, v1)),
        Case("批量、Tq ≠ Tk、d_v ≠ d_k", (_randn(2, 3, 4), _randn(2, 5, 4, seed=1), _randn(2, 5, 3, seed=2))),
        Case("因果掩码", (_randn(4, 2, seed=3), _randn(4, 2, seed=4), _randn(4, 2, seed=5)),
             {"mask": _book_causal(4)}),
        Case("(B, 1, Tk) 的填充掩码", (_randn(2, 3, 8, seed=6), _randn(2, 4, 8, seed=7), _randn(2, 4, 6, seed=8)),
             {"mask": t([[[T_, T_, T_, F_]], [[T_, T_, F_, F_]]])}),
        Case("T = 1", (_randn(2, 1, 16, seed=9, scale=3.0), _randn(2, 1, 16, seed=10), _randn(2, 1, 5, seed=11))),
        Case("多头形状 (B, H, T, d)", (_randn(2, 3, 5, 8, seed=12, scale=2.0), _randn(2, 3, 5, 8, seed=13, scale=2.0),
                                      _randn(2, 3, 5, 8, seed=14))),
        Case("整行都被屏蔽", (_randn(2, 2, seed=15), _randn(3, 2, seed=16), _randn(3, 2, seed=17)),
             {"mask": t([[T_, F_, T_], [F_, F_, F_]])}),
    ]
    why = "《缩放点积注意力与自注意力》§为什么要除以 √d_k"
    mistakes = [
        Mistake("no_scale", "少了 √d_k：分数没有缩放", _sdpa_with(lambda q, v: 1.0), "分数应当是 QKᵀ/√d_k。", why),
        Mistake("scale_dk", "除以了 d_k，而不是 √d_k", _sdpa_with(lambda q, v: 1.0 / q.size(-1)),
                "点积的方差是 d_k，标准差是 √d_k；除以 √d_k 让方差回到 1。", why),
        Mistake("scale_dv", "用 √d_v（值的维数）缩放，应当用 √d_k（查询和键的维数）",
                _sdpa_with(lambda q, v: 1.0 / math.sqrt(v.size(-1))), "", why),
        Mistake("softmax_dim", "Softmax 的方向错了：沿查询（dim=-2）归一化，应当沿键（dim=-1）", _sdpa_with(dim=-2),
                "每个查询对所有键的权重之和为 1，所以沿最后一维（键）做 Softmax。"),
        Mistake("mask_ignored", "没有用上 mask", _sdpa_with(ignore_mask=True), "被屏蔽的键应当得到权重 0。"),
        Mistake("fill_inf", "用 -inf 填充再 Softmax：全被屏蔽的查询得到 nan", _sdpa_with(fill=float("-inf")),
                "一个键都不能看的查询，权重和输出都应当是 0。", "《Softmax 函数详解》§三种常见的错误做法"),
        Mistake("fill_1e9", "用 -1e9 填充再 Softmax：全被屏蔽的查询成了所有值的平均", _sdpa_with(fill=-1e9),
                "一个键都不能看的查询，权重和输出都应当是 0。", "《Softmax 函数详解》§三种常见的错误做法"),
    ]
    return run_cases(fn, _ref_sdpa, cases, mistakes, SDPA.where, ("q", "k", "v"),
                     watch=forbid(_book_sdpa, ops=("scaled_dot_product_attention",)))


register(SDPA, _check_sdpa)

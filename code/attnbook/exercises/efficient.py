"""Exercises of the last two chapters: online Softmax (高效注意力), sliding-window mask and recurrent linear
attention (新形态)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..efficient import online_softmax as _book_online
from ..efficient import sliding_window_mask as _book_window
from ..linear_attention import linear_attention_recurrent as _book_linear
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import randn as _randn
from ._watch import forbid
from ..sliding_window import band_mask as _book_band


# ---------------------------------------------------------------- online_softmax
ONLINE = Exercise(
    "online_softmax", "online_softmax(x, block_size) -> Tensor", "efficient_attention",
    ("两块，后一块的最大值更大", "块大小不整除长度", "块比整行还大", "block_size = 1", "后面的块里有极大的分数", "随机的批量"),
    "在线 Softmax",
    "一块一块地读最后一维，维护运行最大值 m 与运行和 l（最大值变大时把 l 乘以 exp(m_旧 − m_新)），最后输出 exp(x − m) / l。")


def _online_variant(rescale="ok", first_max=False, per_block=False):
    def f(x, block_size):
        if per_block:
            return torch.cat([torch.softmax(b, -1) for b in x.split(block_size, -1)], -1)
        m = torch.full((*x.shape[:-1], 1), -math.inf)
        l = torch.zeros(*x.shape[:-1], 1)
        for i, blk in enumerate(x.split(block_size, -1)):
            m_new = m if (first_max and i > 0) else torch.maximum(m, blk.amax(-1, keepdim=True))
            if rescale == "ok":
                l = l * torch.exp(m - m_new) + torch.exp(blk - m_new).sum(-1, keepdim=True)
            elif rescale == "none":
                l = l + torch.exp(blk - m_new).sum(-1, keepdim=True)
            else:  # "inverted"
                l = l * torch.exp(m_new - m).nan_to_num(0.0) + torch.exp(blk - m_new).sum(-1, keepdim=True)
            m = m_new
        return torch.exp(x - m) / l
    return f


def _check_online(fn):
    t = torch.tensor
    cases = [
        Case("两块，后一块的最大值更大", (t([[1.0, 2.0, 3.0, 4.0]]), 2)),
        Case("块大小不整除长度", (t([[0.5, 3.0, -1.0, 2.0, 4.0]]), 2)),
        Case("块比整行还大", (t([[1.0, -2.0, 0.5]]), 8)),
        Case("block_size = 1", (t([[3.0, 1.0, 4.0, 1.0, 5.0]]), 1)),
        Case("后面的块里有极大的分数", (t([[0.0, 1.0, 500.0, 1000.0]]), 2)),
        Case("随机的批量", (_randn(3, 4, 13, scale=5.0), 4)),
    ]
    mistakes = [
        Mistake("no_rescale", "最大值变大时忘了重新缩放运行和：l 应当先乘以 exp(m_旧 − m_新)", _online_variant(rescale="none"),
                "前面各块的 exp 是相对旧的最大值算的；换了最大值，旧的和要乘以 exp(m_旧 − m_新) 才能与新的项相加。"),
        Mistake("rescale_inverted", "重新缩放的方向反了：应当乘以 exp(m_旧 − m_新)（≤ 1），不是 exp(m_新 − m_旧)",
                _online_variant(rescale="inverted"), ""),
        Mistake("first_block_max", "只用了第一块的最大值：后面的块里有更大的分数时 exp 溢出", _online_variant(first_max=True),
                "运行最大值每读一块都要更新。"),
        Mistake("per_block", "每一块各自做了 Softmax：各块的权重没有放在同一个分母下", _online_variant(per_block=True), ""),
    ]
    return run_cases(fn, _book_online, cases, mistakes, ONLINE.where, ("x", "block_size"),
                     watch=forbid(_book_online, ops=("softmax",), block_arg=1))


register(ONLINE, _check_online)

# ---------------------------------------------------------------- sliding_window_mask
WINDOW = Exercise(
    "sliding_window_mask", "sliding_window_mask(n, window) -> BoolTensor (n, n)", "recent_attention",
    ("n = 5、窗口 2", "窗口 1", "窗口比序列长", "n = 7、窗口 3"),
    "滑动窗口与注意力汇聚点",
    "因果的滑动窗口：查询 i 可以看键 j，当且仅当 i − window < j ≤ i（含自己，共 window 个键）。")


def _window(n, lo, hi, causal=True):
    i = torch.arange(n)
    d = i[:, None] - i[None, :]
    return ((d >= lo) & (d <= hi)) if causal else (d.abs() <= hi)


def _check_window(fn):
    cases = [Case("n = 5、窗口 2", (5, 2)), Case("窗口 1", (4, 1)), Case("窗口比序列长", (3, 5)),
             Case("n = 7、窗口 3", (7, 3))]
    mistakes = [
        Mistake("one_too_many", "窗口多了一个键：i − j ≤ window，应当是 i − j < window", lambda n, w: _window(n, 0, w), ""),
        Mistake("excludes_self", "窗口里没有自己：查询 i 应当能看见 j = i", lambda n, w: _window(n, 1, w), ""),
        Mistake("not_causal", "窗口向两边伸展（不是因果的）：查询看见了未来", lambda n, w: _window(n, 0, w - 1, causal=False), ""),
        Mistake("inverted", "True 的含义反了：本书的掩码 True = 可以看", lambda n, w: ~_book_window(n, w), "",
                "《Softmax 函数详解》§填充掩码与因果掩码"),
    ]
    return run_cases(fn, lambda n, w: _book_window(n, w), cases, mistakes, WINDOW.where, ("n", "window"),
                     watch=forbid(_book_window, _book_band))


register(WINDOW, _check_window)

# ---------------------------------------------------------------- linear_attention_recurrent
LINEAR = Exercise(
    "linear_attention_recurrent", "linear_attention_recurrent(q, k, v) -> Tensor", "recent_attention",
    ("T = 1", "T = 3、d = 2", "批量、d_v ≠ d", "很负的查询和键"),
    "线性注意力：注意力变回 RNN",
    "因果线性注意力，逐个词元更新状态 S += φ(k_i) v_iᵀ、z += φ(k_i)，输出 φ(q_i)ᵀS / φ(q_i)ᵀz，φ(x) = elu(x) + 1；"
    "q、k (..., T, d)，v (..., T, d_v)。")


def _linear_variant(phi=lambda x: F.elu(x) + 1, causal=True, normalise=True, update_after=False):
    def f(q, k, v):
        fq, fk = phi(q), phi(k)
        scores = fq @ fk.transpose(-2, -1)                                   # (..., T, T)
        t = q.size(-2)
        keep = torch.ones(t, t, dtype=torch.bool)
        keep = keep.tril(-1) if update_after else (keep.tril() if causal else keep)
        scores = scores * keep
        num = scores @ v
        return num / scores.sum(-1, keepdim=True) if normalise else num
    return f


def _check_linear(fn):
    t = torch.tensor
    cases = [
        Case("T = 1", (t([[0.5, -1.0]]), t([[1.0, 0.0]]), t([[2.0, 3.0]]))),
        Case("T = 3、d = 2", (t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), t([[1.0, -1.0], [0.5, 0.5], [-1.0, 2.0]]),
                              t([[1.0], [2.0], [3.0]]))),
        Case("批量、d_v ≠ d", (_randn(2, 5, 4), _randn(2, 5, 4, seed=1), _randn(2, 5, 3, seed=2))),
        Case("很负的查询和键", (_randn(4, 3, seed=3) - 5, _randn(4, 3, seed=4) - 5, _randn(4, 2, seed=5))),
    ]
    mistakes = [
        Mistake("elu_only", "特征映射少了 +1：φ(x) = elu(x) + 1 才保证特征为正", _linear_variant(phi=F.elu),
                "elu(x) 在 x < 0 时为负，分母 φ(q)ᵀz 可能接近 0 或变号。"),
        Mistake("non_causal", "不是因果的：每个位置用了全部词元的状态", _linear_variant(causal=False),
                "逐个词元更新状态，位置 i 的输出只用到前 i 个词元。"),
        Mistake("no_normaliser", "没有除以归一化项 φ(q_i)ᵀz", _linear_variant(normalise=False),
                "这一项对应 Softmax 的分母。"),
        Mistake("update_after", "先输出、后更新状态：词元 i 没有看见自己（第一个词元 0/0 = nan）",
                _linear_variant(update_after=True), "先把 φ(k_i)v_iᵀ 加进状态，再用 φ(q_i) 读出。"),
    ]
    return run_cases(fn, lambda q, k, v: _book_linear(q, k, v)[0], cases, mistakes, LINEAR.where, ("q", "k", "v"))


register(LINEAR, _check_linear)

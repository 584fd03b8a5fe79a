"""Exercises on heads: split_heads and multi-head attention (多头), repeat_kv for GQA (高效注意力)."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention as _book_sdpa
from ..multihead import merge_heads as _book_merge
from ..multihead import repeat_kv as _book_repeat_kv
from ..multihead import split_heads as _book_split
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import randn as _randn


# ---------------------------------------------------------------- split_heads
SPLIT = Exercise(
    "split_heads", "split_heads(x, num_heads) -> Tensor (B, H, T, D/H)", "multihead",
    ("B = 1、T = 2、D = 4、两个头", "三个头", "一个头", "T = 5、四个头"),
    "一次算完所有头：形状逐步走一遍",
    "把特征切成 num_heads 段连续的切片（特征 j 属于头 j // (D/H)），再把头的维度移到批量旁边。")


def _split_reshape(x, h):
    b, t, d = x.shape
    return x.reshape(b, h, t, d // h)


def _split_interleaved(x, h):
    b, t, d = x.shape
    return x.reshape(b, t, d // h, h).permute(0, 3, 1, 2)


def _split_no_transpose(x, h):
    b, t, d = x.shape
    return x.reshape(b, t, h, d // h)


def _check_split(fn):
    cases = [
        Case("B = 1、T = 2、D = 4、两个头", (torch.arange(8.0).view(1, 2, 4), 2)),
        Case("三个头", (_randn(2, 3, 6), 3)),
        Case("一个头", (_randn(2, 3, 4, seed=1), 1)),
        Case("T = 5、四个头", (_randn(1, 5, 8, seed=2), 4)),
    ]
    where = "《多头注意力》§一次算完所有头：形状逐步走一遍"
    mistakes = [
        Mistake("reshape", "用 reshape 直接变成 (B, H, T, D/H)：该用转置的地方用了 reshape", _split_reshape,
                "reshape 按内存顺序重新切分，把不同位置的特征混进了同一个头。先 view 成 (B, T, H, D/H)，再 transpose(1, 2)。",
                where),
        Mistake("interleaved", "特征交错地分给了各个头（头 h 拿到特征 h, h+H, …），本书的头拿的是连续的一段", _split_interleaved,
                "view 成 (B, T, H, D/H)，不是 (B, T, D/H, H)。", where),
        Mistake("no_transpose", "只做了 view，没有把头的维度移到 T 前面：形状是 (B, T, H, D/H)", _split_no_transpose,
                "attention 把最后两维当作 (T, d)，所以要 transpose(1, 2) 得到 (B, H, T, D/H)。", where),
    ]
    return run_cases(fn, _book_split, cases, mistakes, SPLIT.where, ("x", "num_heads"))


register(SPLIT, _check_split)

# ---------------------------------------------------------------- multihead_attention
MHA = Exercise(
    "multihead_attention", "multihead_attention(x, w_q, w_k, w_v, w_o, num_heads) -> Tensor (B, T, d)", "multihead",
    ("B = 1、T = 2、d = 4、两个头", "三个头", "一个头", "T = 1"),
    "定义",
    "投影（y = x @ w）→ 切成头 → 每个头缩放点积注意力（除以 √(d/H)）→ 合并 → 乘 w_o；x (B, T, d)，权重 (d, d)，不用掩码。")


def _mha_variant(split="ok", merge="ok", scale="head", use_o=True):
    def f(x, w_q, w_k, w_v, w_o, num_heads):
        b, t, d = x.shape
        h, dh = num_heads, d // num_heads

        def sp(y):
            if split == "reshape":
                return y.reshape(b, h, t, dh)
            return y.view(b, t, h, dh).transpose(1, 2)
        q, k, v = sp(x @ w_q), sp(x @ w_k), sp(x @ w_v)
        s = q @ k.transpose(-2, -1) / math.sqrt(dh if scale == "head" else d)
        o = torch.softmax(s, dim=-1) @ v                               # (B, H, T, dh)
        o = o.reshape(b, t, d) if merge == "reshape" else o.transpose(1, 2).reshape(b, t, d)
        return o @ w_o if use_o else o
    return f


def _mha_ref(x, w_q, w_k, w_v, w_o, num_heads):
    heads = [_book_split(x @ w, num_heads) for w in (w_q, w_k, w_v)]
    return _book_merge(_book_sdpa(*heads)[0]) @ w_o


def _mha_args(b, t, d, h, seed):
    return (_randn(b, t, d, seed=seed), *(_randn(d, d, seed=seed + i + 1, scale=d ** -0.5 * 2) for i in range(4)), h)


def _check_mha(fn):
    cases = [
        Case("B = 1、T = 2、d = 4、两个头", _mha_args(1, 2, 4, 2, 0)),
        Case("三个头", _mha_args(2, 5, 6, 3, 10)),
        Case("一个头", _mha_args(2, 3, 4, 1, 20)),
        Case("T = 1", _mha_args(3, 1, 8, 4, 30)),
    ]
    where = "《多头注意力》§一次算完所有头：形状逐步走一遍"
    mistakes = [
        Mistake("split_reshape", "切头时用 reshape 直接变成 (B, H, T, d/H)：该用转置的地方用了 reshape",
                _mha_variant(split="reshape"), "先 view 成 (B, T, H, d/H)，再 transpose(1, 2)。", where),
        Mistake("merge_reshape", "合并时直接把 (B, H, T, d/H) reshape 成 (B, T, d)：少了 transpose(1, 2)",
                _mha_variant(merge="reshape"), "合并是切分的逆：先 transpose(1, 2) 回到 (B, T, H, d/H)，再 reshape。", where),
        Mistake("scale_d", "缩放用了 √d，应当用每个头的维数 √(d/H)", _mha_variant(scale="model"),
                "每个头的查询和键是 d/H 维的，点积的方差是 d/H。", "《缩放点积注意力与自注意力》§为什么要除以 √d_k"),
        Mistake("no_output_projection", "少了输出投影 w_o", _mha_variant(use_o=False), "各头拼接之后还要乘 W^O。",
                "《多头注意力》§定义"),
    ]
    return run_cases(fn, _mha_ref, cases, mistakes, MHA.where, ("x", "w_q", "w_k", "w_v", "w_o", "num_heads"))


register(MHA, _check_mha)

# ---------------------------------------------------------------- repeat_kv
REPEAT = Exercise(
    "repeat_kv", "repeat_kv(x, n_rep) -> Tensor (B, Hkv * n_rep, T, Dh)", "efficient_attention",
    ("两个键值头、各用两次", "n_rep = 1", "三组、批量", "T = 1"),
    "多查询与分组查询注意力",
    "分组查询注意力：查询头 i 用键值头 i // n_rep，即每个键值头连续重复 n_rep 次；x (B, Hkv, T, Dh)。")


def _check_repeat(fn):
    t = torch.tensor
    cases = [
        Case("两个键值头、各用两次", (t([[[[1.0]], [[2.0]]]]), 2)),
        Case("n_rep = 1", (_randn(1, 2, 3, 2), 1)),
        Case("三组、批量", (_randn(2, 3, 4, 2, seed=1), 2)),
        Case("T = 1", (_randn(1, 2, 1, 4, seed=2), 3)),
    ]
    mistakes = [
        Mistake("tile", "用 repeat / cat 把整组键值头平铺了：查询头 i 拿到的是键值头 i % Hkv",
                lambda x, n: x.repeat(1, n, 1, 1),
                "相邻的查询头共用一个键值头：用 repeat_interleave(n_rep, dim=1)，或 x[:, :, None].expand(...) 再 reshape。"),
        Mistake("time_axis", "沿时间维（dim=2）重复了：应当沿头的维（dim=1）", lambda x, n: x.repeat_interleave(n, dim=2), ""),
        Mistake("batch_axis", "沿批量维（dim=0）重复了：应当沿头的维（dim=1）", lambda x, n: x.repeat_interleave(n, dim=0), ""),
    ]
    return run_cases(fn, _book_repeat_kv, cases, mistakes, REPEAT.where, ("x", "n_rep"))


register(REPEAT, _check_repeat)

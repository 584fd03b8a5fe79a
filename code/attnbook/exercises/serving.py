"""Exercises of the serving chapter (推理时的注意力): reading a sequence out of a paged KV cache, and the
residual distribution of speculative sampling."""

from __future__ import annotations

import torch

from ..paged_cache import gather_blocks as _book_gather
from ..speculative import residual_distribution as _book_residual
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import randn as _randn
from ._watch import forbid


# ---------------------------------------------------------------- paged_gather
GATHER = Exercise(
    "paged_gather", "paged_gather(pool, block_table, length) -> Tensor", "serving",
    ("一个头、块按顺序", "块表打乱了顺序", "序列停在一块的中间", "两个头、块大小 1", "两个头、停在块中间"),
    "分页 KV 缓存",
    "按块表读出一个序列的前 length 个词元：pool (N, Hkv, S, Dh)，block_table (n,) int64 -> (Hkv, length, Dh)。")


def _gather_ref(pool, block_table, length):
    return _book_gather(pool, block_table, length)


def _no_transpose(pool, block_table, length):
    blocks = pool[block_table]                                    # (n, Hkv, S, Dh)
    return blocks.reshape(pool.size(1), -1, pool.size(3))[:, :length]


def _no_truncate(pool, block_table, length):
    return pool[block_table].transpose(0, 1).flatten(1, 2)


def _ignore_table(pool, block_table, length):
    return pool[: block_table.numel()].transpose(0, 1).flatten(1, 2)[:, :length]


def _check_gather(fn):
    arange = lambda *s: torch.arange(float(torch.tensor(s).prod())).reshape(*s)   # noqa: E731 -- readable values
    cases = [
        Case("一个头、块按顺序", (arange(3, 1, 2, 1), torch.tensor([0, 1, 2]), 6)),
        Case("块表打乱了顺序", (arange(4, 1, 2, 1), torch.tensor([3, 0, 2]), 6)),
        Case("序列停在一块的中间", (arange(4, 1, 3, 1), torch.tensor([2, 0]), 4)),
        Case("两个头、块大小 1", (_randn(5, 2, 1, 3), torch.tensor([4, 1, 3]), 3)),
        Case("两个头、停在块中间", (_randn(6, 2, 4, 3, seed=1), torch.tensor([5, 2, 0]), 10)),
    ]
    mistakes = [
        Mistake("no_transpose", "没有先把头的维度换到前面就 reshape：形状对了，位置乱了", _no_transpose,
                "取出的块是 (n, Hkv, S, Dh)；要把“块 × 槽”连成位置，先换成 (Hkv, n, S, Dh)，再展平后两维之前的那两维。"),
        Mistake("no_truncate", "没有截到 length：最后一块空着的槽也读出来了", _no_truncate,
                "序列常常停在一块的中间，最后一块后面的槽是别的内容或空的。"),
        Mistake("ignore_table", "没有按块表取块，而是读了池里最前面的几块", _ignore_table,
                "块表说的是这个序列的第 i 段存在哪一块；块在池里的位置与序列里的顺序无关。"),
    ]
    return run_cases(fn, _gather_ref, cases, mistakes, GATHER.where, ("pool", "block_table", "length"),
                     watch=forbid(_book_gather))


register(GATHER, _check_gather)

# ---------------------------------------------------------------- speculative_residual
RESIDUAL = Exercise(
    "speculative_residual", "speculative_residual(p, q) -> Tensor", "serving",
    ("三个词元", "草稿给某些词元的概率比目标大", "p 与 q 相同", "一千个词元"),
    "投机解码：猜几个，验一次",
    "拒绝草稿的提议后改从残差分布里抽：max(0, p − q) 归一化；p 与 q 处处相同时残差为空，返回 p。p、q 形状 (V,)。")


def _residual_ref(p, q):
    return _book_residual(p, q)


def _from_target(p, q):
    return p.clone()


def _not_normalised(p, q):
    return (p - q).clamp(min=0)


def _no_empty_case(p, q):
    r = (p - q).clamp(min=0)
    return r / r.sum()          # 0 / 0 = nan when p == q


def _absolute(p, q):
    r = (p - q).abs()
    return r / r.sum()


def _reversed(p, q):
    r = (q - p).clamp(min=0)
    return r / r.sum()


def _check_residual(fn):
    t = lambda *xs: torch.tensor(xs, dtype=torch.float64)   # noqa: E731
    big_p = _randn(1000, seed=2).double().softmax(0)
    big_q = _randn(1000, seed=3).double().softmax(0)
    cases = [
        Case("三个词元", (t(0.5, 0.25, 0.25), t(0.25, 0.5, 0.25))),
        Case("草稿给某些词元的概率比目标大", (t(0.1, 0.2, 0.3, 0.4), t(0.4, 0.3, 0.2, 0.1))),
        Case("p 与 q 相同", (t(0.2, 0.3, 0.5), t(0.2, 0.3, 0.5))),
        Case("一千个词元", (big_p, big_q), atol=1e-9, rtol=1e-7),
    ]
    mistakes = [
        Mistake("from_target", "拒绝后直接从目标分布 p 抽：在草稿也看好的词元上多算了一份", _from_target,
                "接受已经给了每个词元 min(p, q)；拒绝后只该补上 p 比 q 多出来的部分 max(0, p − q)。"),
        Mistake("not_normalised", "没有归一化：max(0, p − q) 的和是拒绝的概率，不是 1", _not_normalised,
                "除以 Σ max(0, p − q)，它才是一个分布。"),
        Mistake("no_empty_case", "没有处理 p 与 q 相同的情形：残差为空，0 / 0 得到 nan", _no_empty_case,
                "p 与 q 处处相同时 max(0, p − q) 全为 0，没有东西可归一化；这时返回 p（反正不会被拒绝）。"),
        Mistake("absolute", "用了 |p − q|：草稿给得多的词元也分到了残差", _absolute,
                "q 比 p 大的词元已经被接受得太多（接受率 p/q < 1 正是为了削掉它），残差里它们应当是 0。"),
        Mistake("reversed", "把 p 和 q 弄反了：max(0, q − p)", _reversed,
                "残差补的是目标想要而草稿给少了的部分，是 p − q。"),
    ]
    return run_cases(fn, _residual_ref, cases, mistakes, RESIDUAL.where, ("p", "q"))


register(RESIDUAL, _check_residual)

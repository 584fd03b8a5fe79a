"""Exercises of the positions chapter: the sinusoidal table and RoPE."""

from __future__ import annotations

import torch

from ..positional import apply_rotary as _book_rotary
from ..positional import sinusoidal_encoding as _book_sinusoidal
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import randn as _randn
from ._watch import forbid


# ---------------------------------------------------------------- sinusoidal_encoding
SINUSOIDAL = Exercise(
    "sinusoidal_encoding", "sinusoidal_encoding(num_positions, d_model) -> Tensor (T, d)", "positional_encoding",
    ("T = 3、d = 4", "T = 1", "奇数的 d_model", "d = 2", "T = 50、d = 16"),
    "正弦位置编码",
    "偶数特征 2i 是 sin(pos · ω_i)，奇数特征 2i+1 是 cos(pos · ω_i)，ω_i = 10000^(−2i/d)；d_model 为奇数时最后一个特征是 sin。")


def _sin_variant(swap=False, exponent="2i", concat=False):
    def f(num_positions, d_model):
        pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
        half = (d_model + 1) // 2
        i = torch.arange(half, dtype=torch.float64)
        if exponent == "2i":
            w = 10000.0 ** (-2 * i / d_model)
        elif exponent == "i":
            w = 10000.0 ** (-i / d_model)
        else:  # "j": every feature its own frequency 10000^(-j/d)
            j = torch.arange(d_model, dtype=torch.float64)
            ang = pos * 10000.0 ** (-j / d_model)
            pe = torch.where(j % 2 == 0, torch.sin(ang), torch.cos(ang))
            return pe.float()
        ang = pos * w
        a, b = (torch.cos(ang), torch.sin(ang)) if swap else (torch.sin(ang), torch.cos(ang))
        if concat:
            return torch.cat([a, b[:, : d_model // 2]], dim=-1).float()
        pe = torch.empty(num_positions, d_model, dtype=torch.float64)
        pe[:, 0::2] = a
        pe[:, 1::2] = b[:, : d_model // 2]
        return pe.float()
    return f


def _check_sinusoidal(fn):
    odd_hint = ("d_model 为奇数时有 ⌈d/2⌉ 个正弦、⌊d/2⌋ 个余弦，常见的 pe[:, 1::2] = torch.cos(position * div_term) "
                "会因形状不合而报错。")
    cases = [
        Case("T = 3、d = 4", (3, 4)),
        Case("T = 1", (1, 6)),
        Case("奇数的 d_model", (4, 5), on_error=odd_hint),
        Case("d = 2", (6, 2)),
        Case("T = 50、d = 16", (50, 16)),
    ]
    mistakes = [
        Mistake("swapped", "sin 和 cos 放反了：偶数特征应当是 sin，奇数特征是 cos", _sin_variant(swap=True), ""),
        Mistake("exponent_i", "频率的指数少了 2：ω_i = 10000^(−2i/d)，i 是第几对特征", _sin_variant(exponent="i"),
                "第 i 对特征（2i, 2i+1）共用一个频率。"),
        Mistake("per_feature", "每个特征用了自己的频率 10000^(−j/d)：同一对的 sin 与 cos 应当共用一个频率",
                _sin_variant(exponent="j"), "平移一个位置等于每对特征转过一个固定角度，要求同一对的两个特征频率相同。",
                "《位置编码》§性质：有界、唯一、平移是一个旋转"),
        Mistake("concat", "把所有 sin 放在前一半、所有 cos 放在后一半：本书（与原论文）是交错排列的",
                _sin_variant(concat=True), "两种排列只差一个固定的特征置换，但本书的约定是偶数位 sin、奇数位 cos。"),
    ]
    return run_cases(fn, lambda n, d: _book_sinusoidal(n, d), cases, mistakes, SINUSOIDAL.where,
                     ("num_positions", "d_model"), watch=forbid(_book_sinusoidal))


register(SINUSOIDAL, _check_sinusoidal)

# ---------------------------------------------------------------- apply_rotary
ROTARY = Exercise(
    "apply_rotary", "apply_rotary(x, positions) -> Tensor", "positional_encoding",
    ("一对特征、位置 1", "T = 3、D = 4", "从位置 5 开始（KV 缓存的偏移）", "批量、D = 8", "float16"),
    "旋转位置编码（RoPE）",
    "把相邻的特征对 (2i, 2i+1) 转过角度 pos · ω_i，ω_i = 10000^(−2i/D)，与 attnbook.apply_rotary 相同；x (..., T, D)，positions (T,)。")


def _rope_variant(pairing="adjacent", sign=1.0, exponent=2.0, use_positions=True):
    def f(x, positions):
        T, D = x.shape[-2:]
        pos = positions if use_positions else torch.arange(T)
        w = 10000.0 ** (-exponent * torch.arange(D // 2, dtype=torch.float64) / D)
        ang = pos.to(torch.float64)[:, None] * w
        cos, sin = torch.cos(ang).float(), torch.sin(ang).float() * sign
        xf = x.float()
        if pairing == "adjacent":
            x0, x1 = xf[..., 0::2], xf[..., 1::2]
            y = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
        else:  # rotate_half: feature i with i + D/2
            x0, x1 = xf[..., : D // 2], xf[..., D // 2:]
            y = torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        return y.to(x.dtype)
    return f


def _check_rotary(fn):
    t = torch.tensor
    cases = [
        Case("一对特征、位置 1", (t([[1.0, 0.0]]), t([1]))),
        Case("T = 3、D = 4", (t([[1.0, 2.0, 3.0, 4.0]] * 3), torch.arange(3))),
        Case("从位置 5 开始（KV 缓存的偏移）", (_randn(3, 6), torch.arange(5, 8))),
        Case("批量、D = 8", (_randn(2, 3, 4, 8, seed=1), torch.arange(4))),
        Case("float16", (_randn(5, 4, seed=2, dtype=torch.float16), torch.arange(5)), atol=2e-3, rtol=2e-3),
    ]
    mistakes = [
        Mistake("rotate_half", "配对方式不同：把特征 i 与 i + D/2 配成一对（Llama 的 rotate_half），本书配的是相邻的 (2i, 2i+1)",
                _rope_variant(pairing="half"), "两种写法只差一个固定的特征置换，但与本书（和 attnbook.apply_rotary）的约定不一致。"),
        Mistake("reversed", "旋转方向反了：y_2i = x_2i cos + x_2i+1 sin", _rope_variant(sign=-1.0),
                "正确的是 y_2i = x_2i cos θ − x_2i+1 sin θ，y_2i+1 = x_2i sin θ + x_2i+1 cos θ。"),
        Mistake("exponent_i", "频率的指数少了 2：ω_i = 10000^(−2i/D)", _rope_variant(exponent=1.0), ""),
        Mistake("ignores_positions", "没有用 positions，而是默认从 0 开始编号", _rope_variant(use_positions=False),
                "生成时新词元的位置从缓存的长度开始，所以位置要作为参数传进来。", "《位置编码》§旋转位置编码（RoPE）"),
    ]
    return run_cases(fn, _book_rotary, cases, mistakes, ROTARY.where, ("x", "positions"),
                     watch=forbid(_book_rotary))


register(ROTARY, _check_rotary)

"""Exercises of the first two chapters: an LSTM step, the additive score, Nadaraya–Watson kernel regression."""

from __future__ import annotations

import torch

from ..recurrent import lstm_step as _book_lstm_step
from ..scoring import additive_score as _book_additive
from ..softmax import softmax as _book_softmax
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import generator as _generator
from ._cases import randn as _randn
from ._watch import forbid
from ..scoring import attend as _book_attend


# ---------------------------------------------------------------- lstm_cell
LSTM = Exercise(
    "lstm_cell", "lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh) -> (h_new, c_new)", "sequence_models",
    ("隐藏维度 1", "批量、随机权重", "零初始状态", "很大的输入（门饱和）"),
    "循环神经网络：RNN、LSTM 与 GRU",
    "LSTM 的一步，权重布局与门的顺序（i, f, g, o）同 torch.nn.LSTMCell：x (B, I)，h、c (B, H)，w_ih (4H, I)，w_hh (4H, H)。")


def _lstm_ref(x, h, c, w_ih, w_hh, b_ih, b_hh):
    return _book_lstm_step(x @ w_ih.T + b_ih, h, c, w_hh, b_hh)


def _lstm_variant(order="ifgo", h_tanh=True, g_act=torch.tanh, forget=True):
    def f(x, h, c, w_ih, w_hh, b_ih, b_hh):
        pre = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        parts = dict(zip(order, pre.chunk(4, dim=-1)))
        i, fg, g, o = (parts[ch] for ch in "ifgo")
        c_new = (torch.sigmoid(fg) * c if forget else c) + torch.sigmoid(i) * g_act(g)
        return torch.sigmoid(o) * (torch.tanh(c_new) if h_tanh else c_new), c_new
    return f


def _lstm_args(b, i, h, seed, scale=1.0, zero_state=False):
    x = _randn(b, i, seed=seed, scale=scale)
    hh = torch.zeros(b, h) if zero_state else _randn(b, h, seed=seed + 1)
    cc = torch.zeros(b, h) if zero_state else _randn(b, h, seed=seed + 2)
    return (x, hh, cc, _randn(4 * h, i, seed=seed + 3), _randn(4 * h, h, seed=seed + 4),
            _randn(4 * h, seed=seed + 5), _randn(4 * h, seed=seed + 6))


def _check_lstm(fn):
    cases = [
        Case("隐藏维度 1", _lstm_args(1, 2, 1, 0)),
        Case("批量、随机权重", _lstm_args(3, 5, 4, 10)),
        Case("零初始状态", _lstm_args(2, 3, 2, 20, zero_state=True)),
        Case("很大的输入（门饱和）", _lstm_args(2, 3, 3, 30, scale=50.0)),
    ]
    mistakes = [
        Mistake("gate_order", "四组预激活的顺序弄错了（PyTorch 的顺序是 i, f, g, o）", _lstm_variant(order="ifog"),
                "W_ih 的前 H 行属于输入门 i，然后是遗忘门 f、候选值 g、输出门 o。"),
        Mistake("no_tanh_h", "输出 h 前少了 tanh：h = σ(o) ⊙ C", _lstm_variant(h_tanh=False),
                "h_t = σ(o) ⊙ tanh(C_t)。"),
        Mistake("sigmoid_g", "候选值 g 用了 σ，应当用 tanh", _lstm_variant(g_act=torch.sigmoid),
                "i、f、o 是门，用 σ；g 是要写进细胞状态的候选值，用 tanh（可以为负）。"),
        Mistake("no_forget", "没有用遗忘门：C = C + σ(i) ⊙ tanh(g)（1997 年的原始 LSTM）", _lstm_variant(forget=False),
                "PyTorch 的 LSTMCell 带遗忘门：C_t = σ(f) ⊙ C_{t-1} + σ(i) ⊙ tanh(g)。"),
    ]
    return run_cases(fn, _lstm_ref, cases, mistakes, LSTM.where, ("x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh"),
                     watch=forbid(_book_lstm_step, ops=("lstm", "lstm_cell")))


register(LSTM, _check_lstm)

# ---------------------------------------------------------------- additive_score
ADDITIVE = Exercise(
    "additive_score", "additive_score(q, k, w_q, w_k, v) -> Tensor (..., Tq, Tk)", "attention_basics",
    ("一个查询、两个键", "Dq ≠ Dk、Tq ≠ Tk", "批量", "很大的输入（tanh 饱和）"),
    "五种打分函数",
    "Bahdanau 的加性打分 vᵀ tanh(W_q q + W_k k)：q (..., Tq, Dq)，k (..., Tk, Dk)，w_q (A, Dq)，w_k (A, Dk)，v (A,)。")


def _add_no_tanh(q, k, w_q, w_k, v):
    return ((q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)) @ v


def _add_tanh_outside(q, k, w_q, w_k, v):
    return torch.tanh(_add_no_tanh(q, k, w_q, w_k, v))


def _add_relu(q, k, w_q, w_k, v):
    return torch.relu((q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)) @ v


def _add_diagonal(q, k, w_q, w_k, v):
    return torch.tanh(q @ w_q.T + k @ w_k.T) @ v


def _check_additive(fn):
    t = torch.tensor
    cases = [
        Case("一个查询、两个键", (t([[1.0, 0.0]]), t([[0.0, 1.0], [1.0, 1.0]]), t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
                                t([[0.5, 0.0], [0.0, 0.5], [1.0, -1.0]]), t([1.0, -1.0, 0.5]))),
        Case("Dq ≠ Dk、Tq ≠ Tk", (_randn(3, 4), _randn(5, 2, seed=1), _randn(6, 4, seed=2), _randn(6, 2, seed=3),
                                  _randn(6, seed=4))),
        Case("批量", (_randn(2, 4, 3, seed=5), _randn(2, 4, 3, seed=6), _randn(5, 3, seed=7), _randn(5, 3, seed=8),
                      _randn(5, seed=9))),
        Case("很大的输入（tanh 饱和）", (_randn(2, 3, seed=10, scale=30.0), _randn(3, 3, seed=11, scale=30.0),
                                     _randn(4, 3, seed=12), _randn(4, 3, seed=13), _randn(4, seed=14))),
    ]
    mistakes = [
        Mistake("no_tanh", "少了 tanh：vᵀ(W_q q + W_k k) 只是两个线性打分之和", _add_no_tanh,
                "没有非线性时分数拆成“只看查询”与“只看键”两项，前一项对所有键相同，Softmax 之后就消失了。"),
        Mistake("tanh_outside", "tanh 放在了最外面：tanh(vᵀ(W_q q + W_k k))", _add_tanh_outside,
                "tanh 作用在长度为 A 的隐藏向量上，然后才与 v 做点积。"),
        Mistake("relu", "用了 ReLU，加性打分用的是 tanh", _add_relu, ""),
        Mistake("diagonal", "只给第 i 个查询和第 i 个键配了对，没有算所有 (查询, 键) 对", _add_diagonal,
                "W_q q 扩成 (..., Tq, 1, A)、W_k k 扩成 (..., 1, Tk, A) 再相加，才得到每一对的隐藏向量。"),
    ]
    return run_cases(fn, _book_additive, cases, mistakes, ADDITIVE.where, ("q", "k", "w_q", "w_k", "v"),
                     watch=forbid(_book_additive))


register(ADDITIVE, _check_additive)

# ---------------------------------------------------------------- kernel_regression
KERNEL = Exercise(
    "kernel_regression", "kernel_regression(queries, keys, values, width) -> Tensor (Tq,)", "attention_basics",
    ("两个键", "随机的一维数据", "离所有键都很远的查询", "很窄的核"),
    "直觉：从查字典到“软”查找",
    "Nadaraya–Watson 回归：权重 softmax_j(−(q − k_j)² / (2 w²))，输出值的加权平均；queries (Tq,)，keys、values (Tk,)。")


def _kernel_scores(queries, keys, width, power=2, square_width=True):
    d = (queries[:, None] - keys[None, :]).abs() ** power
    return -d / (2 * (width ** 2 if square_width else width))


def _kernel_ref(queries, keys, values, width):
    return _book_softmax(_kernel_scores(queries, keys, width), -1) @ values


def _kernel_variant(dim=-1, normalise="stable", power=2, square_width=True):
    def f(queries, keys, values, width):
        s = _kernel_scores(queries, keys, width, power, square_width)
        if normalise == "none":
            w = torch.exp(s)
        elif normalise == "naive":
            w = torch.exp(s) / torch.exp(s).sum(dim, keepdim=True)
        else:
            w = torch.softmax(s, dim)
        return w @ values
    return f


def _check_kernel(fn):
    t = torch.tensor
    g = _generator(1)
    keys = torch.rand(8, generator=g) * 80
    cases = [
        Case("两个键", (t([0.0, 1.0, 2.0]), t([0.0, 2.0]), t([10.0, 20.0]), 1.0)),
        Case("随机的一维数据", (torch.linspace(0, 80, 7), keys, _randn(8, seed=2) * 3 + 15, 10.0)),
        Case("离所有键都很远的查询", (t([1000.0, 5.0]), t([0.0, 4.0, 10.0]), t([1.0, 2.0, 3.0]), 1.0)),
        Case("很窄的核", (t([1.0, 3.2]), t([0.0, 2.0, 4.0]), t([5.0, 6.0, 7.0]), 0.05)),
    ]
    mistakes = [
        Mistake("unnormalised", "权重没有归一化：exp 之后没有除以总和", _kernel_variant(normalise="none"),
                "Nadaraya–Watson 的权重之和为 1，输出是值的加权平均，所以用 Softmax。"),
        Mistake("width_not_squared", "核宽没有平方：应当除以 2w²", _kernel_variant(square_width=False), ""),
        Mistake("abs_distance", "用了 |q − k|，高斯核用的是距离的平方", _kernel_variant(power=1), ""),
        Mistake("wrong_dim", "沿查询的方向归一化了：每个查询对所有键的权重之和才是 1", _kernel_variant(dim=0), ""),
        Mistake("naive", "exp 之后直接除以总和：离所有键都很远的查询得到 0/0 = nan", _kernel_variant(dim=-1, normalise="naive"),
                "分数很负时 exp 全部下溢成 0。用 Softmax（先减去最大值）就得到最近的键的值。",
                "《Softmax 函数详解》§减去最大值"),
    ]
    return run_cases(fn, _kernel_ref, cases, mistakes, KERNEL.where, ("queries", "keys", "values", "width"),
                     watch=forbid(_book_attend))


register(KERNEL, _check_kernel)

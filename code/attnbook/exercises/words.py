"""Exercises on words: skip-gram pairs and cosine neighbours (词向量), masked mean pooling (文本分类)."""

from __future__ import annotations

import torch

from ..classifier import masked_mean as _book_masked_mean
from . import Case, Exercise, Mistake, register, run_cases
from ._cases import generator as _generator
from ._cases import randn as _randn
from ._watch import forbid
from .. import embeddings as _book_embeddings


# ---------------------------------------------------------------- skipgram_pairs
SKIPGRAM = Exercise(
    "skipgram_pairs", "skipgram_pairs(tokens, window) -> list[tuple]", "word_vectors",
    ("三个词、窗口 1", "五个词、窗口 2", "窗口比句子长", "重复的词", "只有一个词", "空句子"),
    "Word2Vec：用上下文预测词",
    "所有 (中心词, 上下文词) 对：上下文词与中心词的距离为 1 到 window，不含中心词自己；顺序不限。")


def _pairs(tokens, window, lo=1, right_only=False):
    out = []
    for i, c in enumerate(tokens):
        for j in range(len(tokens)):
            d = j - i
            if lo <= abs(d) <= window and (d > 0 or not right_only):
                out.append((c, tokens[j]))
    return out


def _check_skipgram(fn):
    cases = [
        Case("三个词、窗口 1", (["我", "爱", "北京"], 1)),
        Case("五个词、窗口 2", (["今天", "北京", "的", "天气", "很好"], 2)),
        Case("窗口比句子长", (["甲", "乙", "丙"], 5)),
        Case("重复的词", (["的", "的", "书", "的"], 1)),
        Case("只有一个词", (["好"], 2)),
        Case("空句子", ([], 2)),
    ]
    mistakes = [
        Mistake("includes_self", "把中心词自己也当成了上下文：(w, w) 对不应出现", lambda t, w: _pairs(t, w, lo=0),
                "上下文词与中心词的距离从 1 开始。"),
        Mistake("window_short", "窗口少算了一个：距离应当可以等于 window", lambda t, w: _pairs(t, w - 1), ""),
        Mistake("window_long", "窗口多算了一个：距离最大是 window", lambda t, w: _pairs(t, w + 1), ""),
        Mistake("right_only", "只取了中心词右边的上下文：左右两边都要", lambda t, w: _pairs(t, w, right_only=True), ""),
    ]
    return run_cases(fn, lambda t, w: _pairs(t, w), cases, mistakes, SKIPGRAM.where, ("tokens", "window"))


register(SKIPGRAM, _check_skipgram)

# ---------------------------------------------------------------- cosine_nearest
NEAREST = Exercise(
    "cosine_nearest", "cosine_nearest(query, vectors, k) -> LongTensor (k,)", "word_vectors",
    ("二维的四个向量", "长度差别很大的向量", "k = 1", "有一行是零向量", "随机的 20 个向量"),
    "最近邻",
    "与 query 余弦相似度最高的 k 个行向量的下标，最相似的在前；零向量的余弦按 0 算；query (D,)，vectors (N, D)。")


def _cosine(query, vectors):
    return (vectors @ query) / (vectors.norm(dim=-1) * query.norm()).clamp_min(1e-12)


def _nearest_ref(query, vectors, k):
    return _cosine(query, vectors).topk(k).indices


def _check_nearest(fn):
    t = torch.tensor
    vecs = t([[1.0, 0.1], [5.0, 5.0], [0.0, 1.0], [-2.0, 0.0]])
    cases = [
        Case("二维的四个向量", (t([1.0, 0.0]), vecs, 2)),
        Case("长度差别很大的向量", (t([0.0, 2.0]), t([[0.1, 1.0], [20.0, 25.0], [1.0, 0.5], [0.0, -1.0]]), 3)),
        Case("k = 1", (t([1.0, 1.0]), vecs, 1)),
        Case("有一行是零向量", (t([1.0, 0.0]), t([[1.0, 1.0], [0.0, 0.0], [-1.0, 0.5], [-1.0, -1.0]]), 3)),
        Case("随机的 20 个向量", (_randn(8), _randn(20, 8, seed=1) * torch.rand(20, 1, generator=_generator(2)) * 5, 5)),
    ]
    mistakes = [
        Mistake("dot", "用了点积而不是余弦：长的向量总是排在前面", lambda q, v, k: (v @ q).topk(k).indices,
                "余弦相似度要除以两个向量的长度，只看方向。"),
        Mistake("ascending", "排反了：取的是最不相似的 k 个", lambda q, v, k: _cosine(q, v).topk(k, largest=False).indices, ""),
        Mistake("euclidean", "用了欧氏距离：它同时受长度影响，与余弦的排序不同",
                lambda q, v, k: (v - q).norm(dim=-1).topk(k, largest=False).indices, ""),
        Mistake("no_zero_guard", "零向量的余弦成了 nan（0/0），被排在了最前面：零向量的相似度应当按 0 算",
                lambda q, v, k: ((v @ q) / (v.norm(dim=-1) * q.norm())).topk(k).indices,
                "分母加一个下限（clamp_min(1e-12)），零向量的余弦就是 0；nan 在 topk 和 sort 里都排在最大的位置。"),
        Mistake("values", "返回的是相似度的值，而不是下标", lambda q, v, k: _cosine(q, v).topk(k).values, ""),
    ]
    return run_cases(fn, _nearest_ref, cases, mistakes, NEAREST.where, ("query", "vectors", "k"),
                     watch=forbid(_book_embeddings.cosine_similarity, _book_embeddings.nearest_neighbors))


register(NEAREST, _check_nearest)

# ---------------------------------------------------------------- masked_mean
MEAN = Exercise(
    "masked_mean", "masked_mean(x, mask) -> Tensor (B, D)", "text_classification",
    ("一条填充了一位的序列", "长度不同的批量", "全是填充的一行", "T = 1"),
    "填充：原始资料错在哪里",
    "只对 mask 为 True（不是填充）的位置求平均；x (B, T, D)，mask (B, T)；一行全是填充时输出 0。")


def _mean_all(x, mask):
    return x.mean(1)


def _mean_div_t(x, mask):
    return (x * mask[..., None]).sum(1) / x.size(1)


def _mean_inverted(x, mask):
    return _book_masked_mean(x, ~mask)


def _mean_nan(x, mask):
    return (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def _check_mean(fn):
    t = torch.tensor
    T_, F_ = True, False
    cases = [
        Case("一条填充了一位的序列", (t([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]]), t([[T_, T_, F_]]))),
        Case("长度不同的批量", (_randn(3, 5, 4), t([[T_] * 5, [T_, T_, F_, F_, F_], [T_, T_, T_, T_, F_]]))),
        Case("全是填充的一行", (t([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]), t([[T_, F_], [F_, F_]]))),
        Case("T = 1", (_randn(2, 1, 3, seed=1), t([[T_], [T_]]))),
    ]
    mistakes = [
        Mistake("mean_all", "把填充位置也算进了平均", _mean_all,
                "填充的向量不是文本的一部分；同一条文本多补几个填充，平均就变了。"),
        Mistake("divide_by_t", "求和时跳过了填充，但除以的是总长度 T，而不是真实长度", _mean_div_t, ""),
        Mistake("inverted", "掩码的含义弄反了：mask 为 True 的是真实的词元", _mean_inverted, ""),
        Mistake("zero_division", "全是填充的一行除以 0，得到 nan", _mean_nan,
                "分母用 max(1, 真实长度)，这一行的平均就是 0。"),
    ]
    return run_cases(fn, _book_masked_mean, cases, mistakes, MEAN.where, ("x", "mask"),
                     watch=forbid(_book_masked_mean))


register(MEAN, _check_mean)

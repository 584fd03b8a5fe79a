"""GloVe (Pennington et al., 2014): word vectors fitted to the logarithm of global co-occurrence counts.

    J = Σ_{i,j: X_ij > 0} f(X_ij) (w_i · w̃_j + b_i + b̃_j - log X_ij)^2,
    f(x) = (x / x_max)^α for x < x_max, else 1          (x_max = 100, α = 3/4 in the paper)

X_ij sums 1/d over the occurrences of word j at distance d <= window from word i (same sentence).
The paper's word vectors are w + w̃.

Shape legend: V vocabulary, D embedding size, B batch of non-zero entries (i, j, X_ij).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .word2vec import flatten_corpus

__all__ = ["cooccurrence_matrix", "glove_weighting", "glove_loss", "GloVe", "train_glove"]


def cooccurrence_matrix(sentences: Sequence[Tensor], vocab_size: int, window: int = 5,
                        harmonic: bool = True) -> Tensor:
    """Symmetric sparse co-occurrence counts within ``window`` words, never across sentences.

    Each pair at distance d adds 1/d (``harmonic``, as GloVe) or 1 to both X_ij and X_ji.

    Shape: sentences N tensors (T_n,) of ids in [0, V) -> sparse (V, V) float32, coalesced.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    ids, sent = flatten_corpus(sentences)  # (N,), (N,)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"ids must lie in [0, {vocab_size}), got min {int(ids.min())}, max {int(ids.max())}")
    rows, cols, vals = [], [], []
    for d in range(1, window + 1):
        same = sent[:-d] == sent[d:]  # (N - d,) pairs (t, t + d) inside one sentence
        left, right = ids[:-d][same], ids[d:][same]
        w = torch.full((len(left),), 1.0 / d if harmonic else 1.0)
        rows += [left, right]
        cols += [right, left]
        vals += [w, w]
    idx = torch.stack([torch.cat(rows), torch.cat(cols)])  # (2, 2 * pairs)
    # coalesce() sums duplicate (i, j) entries: that is the counting.
    return torch.sparse_coo_tensor(idx, torch.cat(vals), (vocab_size, vocab_size),
                                   check_invariants=True).coalesce()


def glove_weighting(x: Tensor, x_max: float = 100.0, alpha: float = 0.75) -> Tensor:
    """f(x) = min(1, (x / x_max)^α): rare pairs count less, frequent pairs are capped at 1. Shape: any."""
    if x_max <= 0:
        raise ValueError(f"x_max must be > 0, got {x_max}")
    return (x / x_max).pow(alpha).clamp(max=1.0)


def glove_loss(w: Tensor, w_tilde: Tensor, b: Tensor, b_tilde: Tensor, x: Tensor, x_max: float = 100.0,
               alpha: float = 0.75, reduction: str = "mean") -> Tensor:
    """f(X_ij) (w_i · w̃_j + b_i + b̃_j - log X_ij)^2, averaged (or summed: the paper's J) over the batch.

    Shape: w, w_tilde (B, D); b, b_tilde, x (B,) with x > 0 -> () scalar.
    """
    if w.shape != w_tilde.shape or w.dim() != 2 or not (b.shape == b_tilde.shape == x.shape == w.shape[:1]):
        raise ValueError(f"need w, w_tilde (B, D) and b, b_tilde, x (B,); got {tuple(w.shape)}, "
                         f"{tuple(w_tilde.shape)}, {tuple(b.shape)}, {tuple(b_tilde.shape)}, {tuple(x.shape)}")
    if bool((x <= 0).any()):
        raise ValueError("GloVe is fitted on non-zero counts only (log 0 = -inf): every x must be > 0")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    err = (w * w_tilde).sum(-1) + b + b_tilde - torch.log(x)  # (B,)
    per_pair = glove_weighting(x, x_max, alpha) * err * err  # (B,)
    return per_pair.mean() if reduction == "mean" else per_pair.sum()


class GloVe(nn.Module):
    """Word and context tables w, w̃ (V, D) and biases b, b̃ (V,), initialised uniform in ±0.5/D as the
    reference code. Dense gradients: AdaGrad leaves a row whose gradient is zero unchanged anyway."""

    def __init__(self, vocab_size: int, dim: int, x_max: float = 100.0, alpha: float = 0.75):
        super().__init__()
        self.x_max, self.alpha = x_max, alpha
        self.w = nn.Embedding(vocab_size, dim)
        self.w_tilde = nn.Embedding(vocab_size, dim)
        self.b = nn.Embedding(vocab_size, 1)
        self.b_tilde = nn.Embedding(vocab_size, 1)
        for emb in (self.w, self.w_tilde, self.b, self.b_tilde):
            nn.init.uniform_(emb.weight, -0.5 / dim, 0.5 / dim)

    def forward(self, i: Tensor, j: Tensor, x: Tensor) -> Tensor:
        """Shape: i, j (B,) int64, x (B,) float -> () mean weighted squared error."""
        return glove_loss(self.w(i), self.w_tilde(j), self.b(i).squeeze(-1), self.b_tilde(j).squeeze(-1), x,
                          self.x_max, self.alpha)

    def vectors(self) -> Tensor:
        """(V, D) word vectors w + w̃."""
        return (self.w.weight + self.w_tilde.weight).detach()


def train_glove(model: GloVe, cooc: Tensor, *, epochs: int = 10, batch_size: int = 8192, lr: float = 0.05,
                seed: int = 0, log: bool = True) -> dict:
    """AdaGrad over the shuffled non-zero entries of ``cooc``, as in the paper.

    Prints one line per epoch to stdout when ``log``. Returns ``{"loss": [mean loss per epoch],
    "entries": non-zeros, "seconds": wall time}``.

    Shape: cooc sparse (V, V) with V = the model's vocabulary.
    """
    v = model.w.num_embeddings
    if not cooc.is_sparse or cooc.shape != (v, v):
        raise ValueError(f"cooc must be a sparse ({v}, {v}) tensor, got layout {cooc.layout}, "
                         f"shape {tuple(cooc.shape)}")
    device = model.w.weight.device
    cooc = cooc.coalesce()
    (i_all, j_all), x_all = cooc.indices().to(device), cooc.values().float().to(device)  # (2, nnz), (nnz,)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adagrad(list(model.parameters()), lr=lr)
    history, start = [], time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(x_all), generator=gen).to(device)
        total = 0.0
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            loss = model(i_all[idx], j_all[idx], x_all[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        history.append(total / len(order))
        if log:
            print(f"第 {epoch + 1}/{epochs} 轮：{len(order):,} 个非零元，平均损失 {history[-1]:.4f}，"
                  f"已用 {time.perf_counter() - start:.1f} s", file=sys.stdout)
    return {"loss": history, "entries": len(x_all), "seconds": time.perf_counter() - start}

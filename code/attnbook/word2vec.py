"""Word2Vec (Mikolov et al., 2013): skip-gram and CBOW with negative sampling, batched in PyTorch.

Skip-gram with negative sampling (SGNS), for a centre word c, a context word o and K noise words n_k ~ P_n:

    loss = -log σ(u_o · v_c) - Σ_k log σ(-u_{n_k} · v_c),       P_n(w) ∝ count(w)^0.75

v = input ("centre") vectors, u = output ("context") vectors; the word vectors are v. CBOW predicts the
centre from h = mean of the context words' input vectors, with the same loss on h.

Shape legend: B batch, K negatives per example, C context slots (2 x window), D embedding size, V vocabulary.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "flatten_corpus", "keep_probabilities", "noise_distribution", "sample_negatives", "skipgram_pairs",
    "cbow_windows",
    "sgns_loss", "cbow_loss", "SkipGram", "CBOW", "train_word2vec",
]


def flatten_corpus(sentences: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Concatenate sentences of ids, remembering which sentence each token came from.

    Shape: sentences N tensors (T_n,) -> (ids (sum T_n,), sentence index (sum T_n,)).
    """
    lengths = torch.tensor([len(s) for s in sentences], dtype=torch.long)
    return torch.cat(list(sentences)), torch.repeat_interleave(torch.arange(len(sentences)), lengths)


def keep_probabilities(counts: Tensor, t: float = 1e-4) -> Tensor:
    """Subsampling of frequent words: keep word w with probability min(1, sqrt(t / f(w))), f = relative frequency.

    Shape: counts (V,) -> (V,) float in (0, 1].
    """
    if t <= 0:
        raise ValueError(f"t must be > 0, got {t}")
    f = counts.double() / counts.sum()  # (V,)
    return torch.sqrt(t / f).clamp(max=1.0).float()


def noise_distribution(counts: Tensor, power: float = 0.75) -> Tensor:
    """P_n(w) ∝ count(w)^power: the 3/4 power lifts rare words relative to the unigram distribution.

    Shape: counts (V,) -> (V,) probabilities.
    """
    if bool((counts < 0).any()):
        raise ValueError("counts must be non-negative")
    p = counts.double().pow(power)
    return (p / p.sum()).float()


def sample_negatives(noise: Tensor, batch: int, k: int, generator: torch.Generator | None = None) -> Tensor:
    """K noise words per example, drawn with replacement from P_n (on ``noise``'s device).

    Shape: noise (V,) -> (batch, k) int64.
    """
    if noise.dim() != 1 or k < 1 or batch < 0:
        raise ValueError(f"need noise (V,), k >= 1, batch >= 0; got {tuple(noise.shape)}, k={k}, batch={batch}")
    return torch.multinomial(noise, batch * k, replacement=True, generator=generator).view(batch, k)  # (B, K)


def _dynamic_windows(n: int, window: int, generator: torch.Generator | None) -> Tensor:
    """word2vec's reduced window: each centre uses b ~ U{1..window}, so near words count more. (n,)"""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    return torch.randint(1, window + 1, (n,), generator=generator)


def skipgram_pairs(ids: Tensor, sentence: Tensor, window: int,
                   generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """All (centre, context) pairs within a dynamic window, never across sentences.

    Shape: ids (N,), sentence (N,) -> (centres (P,), contexts (P,)).
    """
    if ids.shape != sentence.shape or ids.dim() != 1:
        raise ValueError(f"ids and sentence must be 1-D of one length, got {tuple(ids.shape)}, "
                         f"{tuple(sentence.shape)}")
    b = _dynamic_windows(len(ids), window, generator)  # (N,)
    centres, contexts = [], []
    for d in range(1, window + 1):
        same = sentence[:-d] == sentence[d:]  # (N - d,) token i and i + d share a sentence
        right = same & (b[:-d] >= d)  # centre i sees i + d
        left = same & (b[d:] >= d)  # centre i + d sees i
        centres += [ids[:-d][right], ids[d:][left]]
        contexts += [ids[d:][right], ids[:-d][left]]
    return torch.cat(centres), torch.cat(contexts)


def cbow_windows(ids: Tensor, sentence: Tensor, window: int,
                 generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """For each token with at least one context word: its context ids and which slots are real.

    Shape: ids (N,), sentence (N,) -> (targets (M,), contexts (M, C), mask (M, C) bool), C = 2 * window.
    """
    if ids.shape != sentence.shape or ids.dim() != 1:
        raise ValueError(f"ids and sentence must be 1-D of one length, got {tuple(ids.shape)}, "
                         f"{tuple(sentence.shape)}")
    n = len(ids)
    b = _dynamic_windows(n, window, generator)  # (N,)
    offsets = torch.cat([torch.arange(-window, 0), torch.arange(1, window + 1)])  # (C,)
    pos = torch.arange(n)[:, None] + offsets  # (N, C)
    inside = (pos >= 0) & (pos < n)
    pos = pos.clamp(0, max(n - 1, 0))
    mask = inside & (sentence[pos] == sentence[:, None]) & (offsets.abs() <= b[:, None])  # (N, C)
    keep = mask.any(dim=1)  # (N,)
    return ids[keep], ids[pos[keep]], mask[keep]


def sgns_loss(centre: Tensor, context: Tensor, negatives: Tensor) -> Tensor:
    """Mean over the batch of -log σ(u_o·v_c) - Σ_k log σ(-u_k·v_c).

    Shape: centre (B, D) = v_c, context (B, D) = u_o, negatives (B, K, D) = u_k -> () scalar.
    """
    if centre.shape != context.shape or centre.dim() != 2 or negatives.dim() != 3 \
            or negatives.shape[0] != centre.shape[0] or negatives.shape[2] != centre.shape[1]:
        raise ValueError(f"need centre (B, D), context (B, D), negatives (B, K, D); got {tuple(centre.shape)}, "
                         f"{tuple(context.shape)}, {tuple(negatives.shape)}")
    pos = (centre * context).sum(-1)  # (B,)
    neg = (negatives * centre.unsqueeze(1)).sum(-1)  # (B, K)
    # logsigmoid, not log(sigmoid): σ(x) underflows to 0 for x < -88 in float32.
    return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).mean()


def cbow_loss(context: Tensor, mask: Tensor, target: Tensor, negatives: Tensor) -> Tensor:
    """SGNS loss with v_c replaced by h = mean of the kept context vectors.

    Shape: context (B, C, D), mask (B, C) bool, target (B, D), negatives (B, K, D) -> () scalar.
    """
    if context.dim() != 3 or mask.shape != context.shape[:2]:
        raise ValueError(f"need context (B, C, D) and mask (B, C), got {tuple(context.shape)}, {tuple(mask.shape)}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError("every example needs at least one context word (a row of mask is all False)")
    m = mask.to(context.dtype).unsqueeze(-1)  # (B, C, 1)
    h = (context * m).sum(1) / m.sum(1)  # (B, D)
    return sgns_loss(h, target, negatives)


class SkipGram(nn.Module):
    """Two (V, D) tables: ``centre`` (the word vectors) and ``context``. Sparse gradients: a batch touches few rows.

    Initialised as word2vec: centre uniform in ±0.5/D, context zeros.
    """

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.centre = nn.Embedding(vocab_size, dim, sparse=True)
        self.context = nn.Embedding(vocab_size, dim, sparse=True)
        nn.init.uniform_(self.centre.weight, -0.5 / dim, 0.5 / dim)
        nn.init.zeros_(self.context.weight)

    def centre_vectors(self, centre: Tensor) -> Tensor:
        return self.centre(centre)

    def forward(self, centre: Tensor, context: Tensor, negatives: Tensor) -> Tensor:
        """Shape: centre (B,), context (B,), negatives (B, K) int64 -> () loss."""
        return sgns_loss(self.centre_vectors(centre), self.context(context), self.context(negatives))

    def vectors(self) -> Tensor:
        """(V, D) word vectors (the centre table)."""
        return self.centre.weight.detach()


class CBOW(SkipGram):
    """Same tables as :class:`SkipGram`; the centre word is predicted from its averaged context."""

    def forward(self, contexts: Tensor, mask: Tensor, target: Tensor, negatives: Tensor) -> Tensor:
        """Shape: contexts (B, C), mask (B, C), target (B,), negatives (B, K) -> () loss."""
        return cbow_loss(self.centre(contexts), mask, self.context(target), self.context(negatives))


def train_word2vec(model: SkipGram, sentences: Sequence[Tensor], counts: Tensor, *, epochs: int = 1,
                   window: int = 5, negatives: int = 5, batch_size: int = 1024, lr: float = 0.01,
                   subsample: float | None = 1e-4, optimizer: str = "adam", seed: int = 0, log: bool = True) -> dict:
    """Train a :class:`SkipGram` or :class:`CBOW`; new subsampling and windows every epoch.

    ``optimizer="adam"``: SparseAdam at ``lr``. ``optimizer="sgd"``: word2vec's own rule, plain SGD on the
    summed (not averaged) loss of the batch with ``lr`` decaying linearly to 0.

    Prints one line per epoch to stdout when ``log``. Returns ``{"loss": [mean loss per step],
    "examples": examples seen, "seconds": wall time}``.

    Shape: sentences N tensors (T_n,) of ids in [0, V); counts (V,).
    """
    vocab_size = model.context.num_embeddings
    if counts.shape != (vocab_size,):
        raise ValueError(f"counts must be ({vocab_size},) like the model's vocabulary, got {tuple(counts.shape)}")
    device = model.context.weight.device
    gen = torch.Generator().manual_seed(seed)  # subsampling, windows, shuffling (CPU)
    neg_gen = torch.Generator(device=device).manual_seed(seed)  # negatives, drawn where the model lives
    ids, sent = flatten_corpus(sentences)  # (N,), (N,)
    keep_p = keep_probabilities(counts, subsample) if subsample else torch.ones(vocab_size)
    noise = noise_distribution(counts).to(device)  # (V,)
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    opt = (torch.optim.SparseAdam(list(model.parameters()), lr=lr) if optimizer == "adam"
           else torch.optim.SGD(list(model.parameters()), lr=lr))
    cbow = isinstance(model, CBOW)
    history, seen, start = [], 0, time.perf_counter()
    for epoch in range(epochs):
        kept = torch.rand(len(ids), generator=gen) < keep_p[ids]  # (N,) subsample frequent words
        if cbow:
            tensors = cbow_windows(ids[kept], sent[kept], window, gen)  # (M,), (M, C), (M, C)
        else:
            tensors = skipgram_pairs(ids[kept], sent[kept], window, gen)  # (P,), (P,)
        order = torch.randperm(len(tensors[0]), generator=gen)
        tensors = [t[order].to(device) for t in tensors]
        epoch_loss = []
        for s in range(0, len(order), batch_size):
            batch = [t[s:s + batch_size] for t in tensors]
            neg = sample_negatives(noise, len(batch[0]), negatives, neg_gen)  # (B, K)
            loss = model(batch[1], batch[2], batch[0], neg) if cbow else model(batch[0], batch[1], neg)
            opt.zero_grad()
            if optimizer == "sgd":  # sum over the batch; lr from `lr` down to 0 over all epochs
                (loss * len(batch[0])).backward()
                opt.param_groups[0]["lr"] = lr * max(1e-4, 1 - (epoch + s / len(order)) / epochs)
            else:
                loss.backward()
            opt.step()
            epoch_loss.append(loss.item())
        history += epoch_loss
        seen += len(order)
        if log:
            print(f"第 {epoch + 1}/{epochs} 轮：{len(order):,} 个样本，平均损失 {sum(epoch_loss) / len(epoch_loss):.3f}，"
                  f"已用 {time.perf_counter() - start:.1f} s", file=sys.stdout)
    return {"loss": history, "examples": seen, "seconds": time.perf_counter() - start}

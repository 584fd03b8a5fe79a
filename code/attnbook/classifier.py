"""Text classification with self-attention, and the bag-of-n-grams logistic regression it must beat.

Model: characters -> embedding + sinusoidal positions -> multi-head self-attention (padded keys masked)
-> residual + LayerNorm -> mean over the real tokens only -> linear layer -> class logits.

Shape legend: N texts, B batch, T tokens (characters), D = d_model, H heads, C classes, V vocabulary/features.
Padding: id ``PAD_ID`` = 0, always on the right; masks are torch.bool, True = real token / may attend.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .embeddings import Vocab, bag_of_words, idf
from .masks import padding_to_attention_mask
from .multihead import MultiHeadAttention
from .positional import sinusoidal_encoding

__all__ = [
    "PAD_ID", "UNK_ID", "CharVocab", "encode_texts", "masked_mean", "SelfAttentionClassifier",
    "length_batches", "predict", "train_classifier", "char_ngrams", "tfidf_features",
    "LogisticRegression", "train_logistic_regression", "confusion_matrix",
]

PAD_ID, UNK_ID = 0, 1


class CharVocab:
    """Characters seen at least ``min_count`` times in ``texts``; id 0 = <pad>, 1 = <unk>, then by frequency."""

    def __init__(self, texts: Sequence[str], min_count: int = 2):
        self.chars = Vocab.from_sentences((list(t) for t in texts), min_count=min_count)
        self.itos = ["<pad>", "<unk>"] + self.chars.itos
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Ids of the first ``max_len`` characters; unseen characters map to <unk>."""
        return [self.stoi.get(c, UNK_ID) for c in text[:max_len]]


def encode_texts(texts: Sequence[str], vocab: CharVocab, max_len: int) -> tuple[Tensor, Tensor]:
    """Right-padded id matrix (cut at ``max_len`` characters) and the true lengths.

    An empty text keeps length 0 (all padding); :func:`masked_mean` then gives it a zero vector.

    Shape:
        -> ids (N, T) int64 with T = longest kept length, lengths (N,) int64.
    """
    rows = [vocab.encode(t, max_len) for t in texts]
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    ids = torch.full((len(rows), max([1, *map(len, rows)])), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return ids, lengths


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over the positions where mask is True; zero where a row has none.

    Formula: m_b = sum_t mask_bt x_bt / max(1, sum_t mask_bt)

    Shape:
        x: (B, T, D), mask: (B, T) bool -> (B, D)
    """
    if mask.dtype != torch.bool or mask.shape != x.shape[:2]:
        raise ValueError(f"mask must be torch.bool of shape x.shape[:2] = {tuple(x.shape[:2])}, "
                         f"got {mask.dtype} {tuple(mask.shape)}")
    keep = mask.unsqueeze(-1).to(x.dtype)                        # (B, T, 1)
    count = keep.sum(1).clamp_min(1)                              # (B, 1)
    return (x * keep).sum(1) / count                              # (B, D)


class SelfAttentionClassifier(nn.Module):
    """Embedding + positions -> one multi-head self-attention block -> masked mean -> logits.

    Padding (id ``pad_id``) is hidden from the attention (as keys) and from the pooling (as
    queries), so appending padding to a text leaves its logits unchanged. ``attention=False`` is the
    ablation without attention: h_t = LayerNorm(x_t), the same network otherwise (weights is None).
    ``pool="all"`` is the source's pooling: the mean over all T positions, padding included (the
    logits then depend on how far a text is padded).

    Shape:
        ids: (B, T) int64, T <= max_len -> logits (B, num_classes), weights (B, H, T, T).
    """

    def __init__(self, vocab_size: int, num_classes: int = 2, d_model: int = 64, num_heads: int = 4,
                 max_len: int = 512, dropout: float = 0.1, attn_dropout: float = 0.0, pad_id: int = PAD_ID,
                 attention: bool = True, pool: str = "real"):
        super().__init__()
        if pool not in ("real", "all"):
            raise ValueError(f"pool must be 'real' (mean over the real tokens) or 'all' (every position), got {pool!r}")
        self.pad_id, self.max_len, self.pool = pad_id, max_len, pool
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)  # (max_len, D)
        self.attn = MultiHeadAttention(d_model, num_heads, attn_dropout) if attention else None
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        if ids.dim() != 2 or ids.dtype != torch.long or ids.size(1) > self.max_len:
            raise ValueError(f"ids must be int64 of shape (B, T) with T <= {self.max_len}, "
                             f"got {ids.dtype} {tuple(ids.shape)}")
        real = ids != self.pad_id                                   # (B, T)
        x = self.drop(self.embed(ids) + self.pe[: ids.size(1)])     # (B, T, D)
        if self.attn is None:                                       # ablation: each position on its own
            h, weights = self.norm(x), None
        else:
            a, weights = self.attn(x, x, x, padding_to_attention_mask(real))  # keys masked: (B, 1, 1, T)
            h = self.norm(x + self.drop(a))                         # residual + LayerNorm, (B, T, D)
        pooled = masked_mean(h, real) if self.pool == "real" else h.mean(1)  # (B, D)
        return self.head(self.drop(pooled)), weights                # (B, C), (B, H, T, T)


def length_batches(lengths: Tensor, batch_size: int, generator: torch.Generator | None = None,
                   pool: int = 50) -> list[Tensor]:
    """Shuffled batches of indices; within pools of ``pool * batch_size`` texts, similar lengths go together.

    Little padding (speed) while the batches stay random (every text exactly once).

    Shape:
        lengths: (N,) -> list of (<= batch_size,) int64 index tensors.
    """
    order = torch.randperm(len(lengths), generator=generator)
    batches = []
    for chunk in order.split(pool * batch_size):
        chunk = chunk[lengths[chunk].argsort(stable=True)]         # by length inside the pool
        batches.extend(chunk.split(batch_size))
    perm = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in perm]


def _trim(ids: Tensor, lengths: Tensor, index: Tensor) -> Tensor:
    return ids[index, : max(1, int(lengths[index].max()))]       # (b, longest in batch)


@torch.no_grad()
def predict(model: nn.Module, ids: Tensor, lengths: Tensor, batch_size: int = 256) -> Tensor:
    """Logits for every text, in eval mode, on the model's device.

    Shape:
        ids (N, T), lengths (N,) -> logits (N, C) on the CPU.
    """
    model.eval()
    device = next(model.parameters()).device
    order = lengths.argsort()                                      # similar lengths share a batch
    chunks = [model(_trim(ids, lengths, index).to(device))[0].float().cpu() for index in order.split(batch_size)]
    logits = torch.cat(chunks)                                     # (N, C) in sorted order
    return torch.empty_like(logits).index_copy_(0, order, logits)  # back to the input order


def train_classifier(model: nn.Module, train: tuple[Tensor, Tensor, Tensor], val: tuple[Tensor, Tensor, Tensor],
                     epochs: int = 3, batch_size: int = 64, lr: float = 2e-3, weight_decay: float = 0.01,
                     seed: int = 0, out=None) -> dict[str, list]:
    """AdamW with a linear warm-up then cosine decay; prints a progress line per epoch to ``out`` (stdout).

    ``train`` and ``val`` are (ids (N, T), lengths (N,), labels (N,)) as from :func:`encode_texts`.
    Returns the history: per-step training loss; per-epoch mean training loss, validation loss and
    accuracy, and seconds since the start.
    """
    ids, lengths, labels = train
    out = sys.stdout if out is None else out
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)  # one kernel per tensor
    steps = epochs * math.ceil(len(ids) / batch_size)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    hist: dict[str, list] = {"step_loss": [], "epoch": [], "train_loss": [], "val_loss": [], "val_acc": [],
                             "seconds": []}
    start, done = time.perf_counter(), 0
    for epoch in range(1, epochs + 1):
        model.train()
        for index in length_batches(lengths, batch_size, gen):
            logits, _ = model(_trim(ids, lengths, index).to(device))
            loss = F.cross_entropy(logits, labels[index].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            hist["step_loss"].append(loss.item())
            done += 1
        val_logits = predict(model, val[0], val[1])
        n_batches = math.ceil(len(ids) / batch_size)
        hist["epoch"].append(epoch)
        hist["train_loss"].append(sum(hist["step_loss"][-n_batches:]) / n_batches)
        hist["val_loss"].append(float(F.cross_entropy(val_logits, val[2])))
        hist["val_acc"].append(float((val_logits.argmax(1) == val[2]).float().mean()))
        hist["seconds"].append(time.perf_counter() - start)
        bar = "#" * round(20 * done / steps)
        print(f"[{bar:<20}] 第 {epoch}/{epochs} 轮  第 {done}/{steps} 步  "
              f"训练损失 {hist['train_loss'][-1]:.3f}  "
              f"验证损失 {hist['val_loss'][-1]:.3f}  验证准确率 {hist['val_acc'][-1]:.3f}  "
              f"{hist['seconds'][-1]:.1f} 秒", file=out, flush=True)
    return hist


# --- The baseline: logistic regression on TF-IDF-weighted character n-grams ------------------------------------

def char_ngrams(text: str, ns: Sequence[int] = (1, 2)) -> list[str]:
    """All character n-grams of the text for each n in ``ns`` ('好看' -> ['好', '看', '好看'])."""
    return [text[i:i + n] for n in ns for i in range(len(text) - n + 1)]


def tfidf_features(train_texts: Sequence[str], *other: Sequence[str], ns: Sequence[int] = (1, 2),
                   min_count: int = 2) -> tuple[Vocab, list[Tensor]]:
    """TF-IDF of character n-grams, vocabulary and idf fitted on the training texts only.

    Formula: x_nv = tf_nv * idf_v / ||row n||,  idf_v = ln((1 + N) / (1 + df_v)) + 1 (N, df from train).

    Shape:
        -> (vocabulary of V n-grams, [sparse (N_i, V) float32 for train and each of ``other``])
    """
    grams = [[char_ngrams(t, ns) for t in texts] for texts in (train_texts, *other)]
    vocab = Vocab.from_sentences(grams[0], min_count=min_count)
    counts = [bag_of_words([vocab.encode(g) for g in docs], len(vocab)) for docs in grams]  # sparse (N_i, V)
    df = torch.bincount(counts[0].indices()[1], minlength=len(vocab))   # documents containing each n-gram
    weights = idf(df, len(train_texts))                                 # (V,)
    out = []
    for c in counts:
        (rows, cols), values = c.indices(), c.values() * weights[c.indices()[1]]
        norms = torch.zeros(c.shape[0]).index_add_(0, rows, values * values).sqrt()  # (N_i,)
        values = values / norms[rows].clamp_min(1e-12)
        out.append(torch.sparse_coo_tensor(c.indices(), values, c.shape, check_invariants=True).coalesce())
    return vocab, out


class LogisticRegression(nn.Module):
    """Multinomial logistic regression on sparse (or dense) features: logits = x W^T + b.

    Shape:
        x: (N, V) sparse COO or dense -> logits (N, C).
    """

    def __init__(self, num_features: int, num_classes: int = 2):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_classes, num_features))
        self.bias = nn.Parameter(torch.zeros(num_classes))

    def forward(self, x: Tensor) -> Tensor:
        xw = torch.sparse.mm(x, self.weight.T) if x.is_sparse else x @ self.weight.T  # (N, C)
        return xw + self.bias


def train_logistic_regression(x: Tensor, y: Tensor, num_classes: int = 2, l2: float = 1e-4,
                              max_iter: int = 100) -> LogisticRegression:
    """Minimise mean cross-entropy + (l2 / 2) ||W||^2 with full-batch L-BFGS (convex: deterministic optimum).

    The gradient is the closed form dW = (softmax(XW^T + b) - Y)^T X / N + l2 W, db = column sums / N,
    with X and X^T converted once to CSR (about 10x faster products than COO on CPU): two sparse-dense
    products per evaluation, no autograd graph.

    Shape:
        x: (N, V) sparse or dense, y: (N,) int64 -> a fitted LogisticRegression(V, C).
    """
    if x.dim() != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"need x (N, V) and y (N,), got {tuple(x.shape)} and {tuple(y.shape)}")
    model = LogisticRegression(x.shape[1], num_classes).to(x.device)
    xt = x.t()                                                           # (V, N)
    if x.is_sparse:
        with warnings.catch_warnings():  # torch flags its CSR layout as "beta" with a UserWarning
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
            x, xt = x.to_sparse_csr(), xt.coalesce().to_sparse_csr()
    onehot = F.one_hot(y, num_classes).float()                           # (N, C)
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=max_iter, history_size=20,
                            tolerance_grad=1e-9, tolerance_change=1e-12, line_search_fn="strong_wolfe")

    @torch.no_grad()
    def closure():
        logits = x @ model.weight.T + model.bias                         # (N, C)
        loss = F.cross_entropy(logits, y) + 0.5 * l2 * model.weight.pow(2).sum()
        g = (logits.softmax(-1) - onehot) / len(y)                       # dLoss/dlogits, (N, C)
        model.weight.grad = (xt @ g).T.contiguous() + l2 * model.weight  # (C, V)
        model.bias.grad = g.sum(0)                                       # (C,)
        return loss

    opt.step(closure)
    return model


def confusion_matrix(y_true: Tensor, y_pred: Tensor, num_classes: int = 2) -> Tensor:
    """Counts M[i, j] = #(true class i, predicted class j).

    Shape:
        y_true, y_pred: (N,) int64 -> (C, C) int64.
    """
    if y_true.shape != y_pred.shape or y_true.dim() != 1:
        raise ValueError(f"y_true {tuple(y_true.shape)} and y_pred {tuple(y_pred.shape)} must be equal (N,)")
    return torch.bincount(y_true * num_classes + y_pred, minlength=num_classes ** 2).view(num_classes, num_classes)

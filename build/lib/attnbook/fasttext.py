"""FastText's idea (Bojanowski et al., 2017): a word's vector is built from its character n-grams, so a word
never seen in training still gets a vector from the pieces it shares with seen words.

    v_w = mean( [z_w] + [z_g for g in ngrams("<" + w + ">")] )      (the reference code averages)

n-grams are hashed (32-bit FNV-1a, the hash fastText uses) into a fixed number of buckets, so unseen n-grams
also have a row (shared with whatever collides with them). fastText's C++ code sign-extends bytes >= 0x80
before the XOR, so its bucket ids for non-ASCII n-grams differ from standard FNV-1a; the idea is the same. Trained with the skip-gram negative-sampling loss of
:mod:`attnbook.word2vec`; for Chinese, n = 1..3 characters (single characters carry much of the meaning).

Shape legend: B batch, K negatives, V vocabulary, G buckets, L n-grams per word (padded), D embedding size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .word2vec import sgns_loss

__all__ = ["fnv1a_32", "char_ngrams", "subword_table", "FastText"]

_FNV_OFFSET, _FNV_PRIME = 0x811C9DC5, 0x01000193


def fnv1a_32(text: str) -> int:
    """32-bit FNV-1a hash of the UTF-8 bytes (deterministic, unlike Python's ``hash``)."""
    h = _FNV_OFFSET
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def char_ngrams(word: str, n_min: int = 1, n_max: int = 3) -> list[str]:
    """Character n-grams of ``"<" + word + ">"`` for n_min <= n <= n_max, in order of start then length.

    As fastText: a lone boundary marker ("<" or ">") is not an n-gram; the whole "<word>" is one when short
    enough. ``char_ngrams("中国")`` -> ['<中', '<中国', '中', '中国', '中国>', '国', '国>'].
    """
    if not 1 <= n_min <= n_max:
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    if not word:
        raise ValueError("word must be a non-empty string")
    s = f"<{word}>"
    out = []
    for i in range(len(s)):
        for n in range(n_min, n_max + 1):
            if i + n > len(s):
                break
            if n == 1 and s[i] in "<>" and (i == 0 or i == len(s) - 1):
                continue
            out.append(s[i:i + n])
    return out


def subword_table(words: Sequence[str], buckets: int, n_min: int = 1, n_max: int = 3,
                  vocab: dict[str, int] | None = None) -> Tensor:
    """Row ids for each word: its own row (if it is in ``vocab``) then V + hash(g) % buckets per n-gram.

    Padded with V + buckets (the padding row, ignored by the mean), V = len(vocab).

    Shape: words (N,) -> (N, L) int64.
    """
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    vocab = vocab or {}
    v = len(vocab)
    rows = [([vocab[w]] if w in vocab else []) + [v + fnv1a_32(g) % buckets for g in char_ngrams(w, n_min, n_max)]
            for w in words]
    width = max((len(r) for r in rows), default=1)
    return torch.tensor([r + [v + buckets] * (width - len(r)) for r in rows], dtype=torch.long)


class FastText(nn.Module):
    """Skip-gram whose centre vector is the mean of the word's own row and its n-gram rows.

    ``itos`` is the training vocabulary (list of words, index = id); ``buckets`` rows hold the n-grams.
    """

    def __init__(self, itos: Sequence[str], dim: int, buckets: int = 2 ** 17, n_min: int = 1, n_max: int = 3):
        super().__init__()
        self.itos, self.buckets, self.n_min, self.n_max = list(itos), buckets, n_min, n_max
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        v = len(self.itos)
        # Rows: [0, V) words, [V, V + G) n-gram buckets, V + G padding.
        self.inputs = nn.EmbeddingBag(v + buckets + 1, dim, mode="mean", sparse=True, padding_idx=v + buckets)
        self.context = nn.Embedding(v, dim, sparse=True)
        with torch.no_grad():
            self.inputs.weight.uniform_(-1.0 / dim, 1.0 / dim)  # fastText's init
            self.inputs.weight[v + buckets].zero_()
        nn.init.zeros_(self.context.weight)
        table = subword_table(self.itos, buckets, n_min, n_max, self.stoi)  # (V, L) padded
        real = table != v + buckets  # (V, L)
        # Unpadded storage: word w's rows are flat[starts[w] : starts[w] + lengths[w]].
        self.register_buffer("flat", table[real])  # (sum of lengths,)
        self.register_buffer("lengths", real.sum(1))  # (V,)
        self.register_buffer("starts", self.lengths.cumsum(0) - self.lengths)  # (V,)

    def centre_vectors(self, centre: Tensor) -> Tensor:
        """Shape: centre (B,) ids -> (B, D), the mean of each word's rows."""
        n = self.lengths[centre]  # (B,) rows per word
        offsets = n.cumsum(0) - n  # (B,) where each word's bag starts in `rows`
        pos = torch.arange(int(n.sum()), device=n.device) - offsets.repeat_interleave(n)  # (R,) index in bag
        rows = self.flat[self.starts[centre].repeat_interleave(n) + pos]  # (R,) concatenated bags
        return self.inputs(rows, offsets)  # (B, D)

    def forward(self, centre: Tensor, context: Tensor, negatives: Tensor) -> Tensor:
        """Shape: centre (B,), context (B,), negatives (B, K) int64 -> () SGNS loss."""
        return sgns_loss(self.centre_vectors(centre), self.context(context), self.context(negatives))

    @torch.no_grad()
    def word_vectors(self, words: Sequence[str]) -> Tensor:
        """Vectors of any words, in the vocabulary or not (unknown words: n-grams only).

        Shape: words (N,) -> (N, D).
        """
        table = subword_table(words, self.buckets, self.n_min, self.n_max, self.stoi)  # (N, L)
        return self.inputs(table.to(self.inputs.weight.device))

    @torch.no_grad()
    def vectors(self) -> Tensor:
        """(V, D) vectors of the training vocabulary."""
        return self.centre_vectors(torch.arange(len(self.itos), device=self.flat.device))

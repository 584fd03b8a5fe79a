"""Synthetic sequence-to-sequence tasks whose difficulty grows with length: copy or reverse digit strings.

Tokens: 0 = PAD, 1 = BOS, 2 = EOS, 3 … 3+n_digits-1 = the digits. A sequence belongs to the
held-out (test) split either because its length is beyond the training lengths, or because a fixed,
seeded hash of its content says so; the two splits are therefore disjoint by construction, however
many batches are drawn.

Shape legend: N sequences, T source length (the target has the same length).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["PAD", "BOS", "EOS", "DigitTask"]

PAD, BOS, EOS = 0, 1, 2
_FIRST_DIGIT = 3
_PRIME = 1_000_003  # modulus of the content hash


class DigitTask:
    """Copy or reverse strings of random digits; seeded, with a held-out split disjoint from training.

    Args:
        kind: "copy" (target = source) or "reverse" (target = source read backwards).
        n_digits: alphabet size; vocab_size = 3 + n_digits.
        train_lengths: (shortest, longest) length seen in training, inclusive.
        max_length: longest length ever generated; lengths above train_lengths[1] are held out.
        test_fraction: share of each training length reserved (by content hash) for testing.
        seed: fixes the content hash, hence which strings are held out.

    Shape: strings are int64 (N, T); targets have the same shape.
    """

    def __init__(self, kind: str = "copy", n_digits: int = 10, train_lengths: tuple[int, int] = (2, 16),
                 max_length: int = 24, test_fraction: float = 0.2, seed: int = 0):
        if kind not in ("copy", "reverse"):
            raise ValueError(f"kind must be 'copy' or 'reverse', got {kind!r}")
        lo, hi = train_lengths
        if not (1 <= lo <= hi <= max_length):
            raise ValueError(f"need 1 <= train_lengths[0] <= train_lengths[1] <= max_length, got "
                             f"train_lengths={train_lengths}, max_length={max_length}")
        if n_digits < 2 or not 0.0 < test_fraction < 1.0:
            raise ValueError(f"need n_digits >= 2 and 0 < test_fraction < 1, got {n_digits}, {test_fraction}")
        self.kind, self.n_digits = kind, n_digits
        self.train_lengths, self.max_length = (lo, hi), max_length
        self.test_fraction, self.seed = test_fraction, seed
        g = torch.Generator().manual_seed(seed)
        self._hash_weights = torch.randint(1, _PRIME, (max_length,), generator=g)  # (max_length,)

    @property
    def vocab_size(self) -> int:
        return _FIRST_DIGIT + self.n_digits

    def __repr__(self) -> str:
        return (f"DigitTask(kind={self.kind!r}, n_digits={self.n_digits}, train_lengths={self.train_lengths}, "
                f"max_length={self.max_length}, test_fraction={self.test_fraction}, seed={self.seed})")

    def target(self, src: Tensor) -> Tensor:
        """The correct output for each source. Shape: src (N, T) -> (N, T)."""
        return src.clone() if self.kind == "copy" else src.flip(-1)

    def is_held_out(self, src: Tensor) -> Tensor:
        """True where a source string belongs to the test split. Shape: src (N, T) -> (N,) bool."""
        if src.dim() != 2 or not 1 <= src.size(1) <= self.max_length:
            raise ValueError(f"src must be (N, T) with 1 <= T <= {self.max_length}, got {tuple(src.shape)}")
        if src.size(1) > self.train_lengths[1] or src.size(1) < self.train_lengths[0]:
            return torch.ones(src.size(0), dtype=torch.bool, device=src.device)
        w = self._hash_weights[: src.size(1)].to(src.device)
        h = ((src.long() - _FIRST_DIGIT + 1) * w).sum(-1) % _PRIME  # (N,), < 2**63
        return h < int(self.test_fraction * _PRIME)

    def sample(self, n: int, length: int, split: str = "train",
               generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """n random strings of one length from one split, and their targets.

        Shape: -> src (n, length), tgt (n, length), int64 on the CPU.
        """
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        lo, hi = self.train_lengths
        if split == "train" and not lo <= length <= hi:
            raise ValueError(f"length {length} is outside the training lengths {self.train_lengths}")
        if not 1 <= length <= self.max_length:
            raise ValueError(f"length must lie in [1, {self.max_length}], got {length}")
        kept, have = [], 0
        for _ in range(1000):  # rejection sampling against the content hash
            cand = torch.randint(_FIRST_DIGIT, self.vocab_size, (max(2 * n, 64), length), generator=generator)
            cand = cand[self.is_held_out(cand) == (split == "test")]
            kept.append(cand)
            have += cand.size(0)
            if have >= n:
                src = torch.cat(kept)[:n]
                return src, self.target(src)
        raise ValueError(f"the {split} split of length {length} is (nearly) empty; change test_fraction or seed")

    @staticmethod
    def decoder_io(tgt: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: the decoder reads [BOS, y_1..y_T] and must emit [y_1..y_T, EOS].

        Shape: tgt (N, T) -> inputs (N, T+1), outputs (N, T+1).
        """
        bos = torch.full_like(tgt[:, :1], BOS)
        eos = torch.full_like(tgt[:, :1], EOS)
        return torch.cat([bos, tgt], 1), torch.cat([tgt, eos], 1)

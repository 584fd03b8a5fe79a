"""The tile-map widget: pick the sequence length T, the block size b and causal or not, and see which
(b, b) score tiles tiled attention computes, which need a mask, which it skips, and the score memory."""

from __future__ import annotations

from numbers import Integral

import torch
import traitlets as t

from .static import StaticFallbackWidget

SKIPPED, MASKED, FULL = 0, 1, 2
FLOAT32 = 4  # bytes per score


def tile_kinds(seq_len: int, block_size: int, causal: bool) -> torch.Tensor:
    """Kind of each (query block r, key block c) tile, as ``attnbook.tiled_attention`` treats it.

    Tiles are [r b, min((r + 1) b, T)) x [c b, min((c + 1) b, T)). Causal (key j visible iff j <= i):
    skipped if its first key lies after its last query; full if its last key is at or before its first
    query; masked otherwise. Not causal: every tile is full.

    Shape: -> (n_b, n_b) int64, n_b = ceil(T / b); SKIPPED = 0, MASKED = 1, FULL = 2.
    """
    nb = -(-seq_len // block_size)
    first = torch.arange(nb) * block_size                         # first position of each block
    last = torch.clamp(first + block_size, max=seq_len) - 1       # last position of each block
    if not causal:
        return torch.full((nb, nb), FULL, dtype=torch.int64)
    q_first, q_last = first[:, None], last[:, None]               # (n_b, 1) query blocks ↓
    k_first, k_last = first[None, :], last[None, :]               # (1, n_b) key blocks →
    kinds = torch.full((nb, nb), MASKED, dtype=torch.int64)
    kinds[(k_first > q_last).expand(nb, nb)] = SKIPPED
    kinds[(k_last <= q_first).expand(nb, nb)] = FULL
    return kinds


class TileMapWidget(StaticFallbackWidget):
    """The (n_b x n_b) grid of score tiles of tiled attention, drawn in the browser (``tile_map.js``).

    Sliders pick T (a multiple of ``t_step``) and b (from ``block_sizes``); a box switches the causal
    mask. The page counts computed, masked and skipped tiles, compares the count with the chapter's
    formula (n_b (n_b + 1) / 2 causal, n_b^2 otherwise, n_b = ceil(T / b)) and the score-side numbers held
    at once: T^2 for the whole matrix; for tiled attention b^2 + 2b + T (one tile, m and l of its rows, and
    the logsumexp kept for every row).
    ``seq_len``, ``block_size`` and ``causal`` are synced traits.
    """

    _esm_file = "tile_map.js"
    title = "分块注意力的块图"

    seq_len = t.Int(1024).tag(sync=True)
    block_size = t.Int(128).tag(sync=True)
    causal = t.Bool(True).tag(sync=True)
    t_step = t.Int(256).tag(sync=True)
    t_max = t.Int(4096).tag(sync=True)
    block_sizes = t.List(t.Int()).tag(sync=True)

    def __init__(self, seq_len: int = 1024, block_size: int = 128, causal: bool = True, t_step: int = 256,
                 t_max: int = 4096, block_sizes=(64, 128, 256, 512)):
        block_sizes = list(block_sizes)
        for name, v in [("t_step", t_step), ("t_max", t_max), *(("block_sizes[]", b) for b in block_sizes)]:
            if isinstance(v, bool) or not isinstance(v, Integral) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(seq_len, bool) or not isinstance(seq_len, Integral) or seq_len % t_step \
                or not t_step <= seq_len <= t_max:
            raise ValueError(f"seq_len must be a multiple of t_step={t_step} in [{t_step}, {t_max}], got {seq_len!r}")
        if block_size not in block_sizes:
            raise ValueError(f"block_size={block_size!r} is not one of block_sizes={block_sizes}")
        if not isinstance(causal, bool):
            raise ValueError(f"causal must be True or False, got {causal!r}")
        super().__init__(seq_len=int(seq_len), block_size=int(block_size), causal=causal, t_step=int(t_step),
                         t_max=int(t_max), block_sizes=[int(b) for b in block_sizes])

    def kinds(self) -> torch.Tensor:
        """:func:`tile_kinds` at the current settings. Shape: (n_b, n_b)."""
        return tile_kinds(self.seq_len, self.block_size, self.causal)

    def counts(self) -> dict[str, int]:
        """Tiles computed (full + masked), masked, skipped, and n_b."""
        k = self.kinds()
        return dict(n_blocks=k.size(0), computed=int((k != SKIPPED).sum()), masked=int((k == MASKED).sum()),
                    skipped=int((k == SKIPPED).sum()))

    def score_bytes(self) -> dict[str, int]:
        """float32 bytes held at once besides q, k, v and the output: the whole T x T score matrix, vs one
        b x b tile, m and l of its b rows and one logsumexp per row (``_tiled_forward``'s ``lse``)."""
        T, b = self.seq_len, self.block_size
        return dict(full=FLOAT32 * T * T, tiled=FLOAT32 * (b * b + 2 * b + T))


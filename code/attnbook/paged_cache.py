"""A paged KV cache (Kwon et al., 2023, "PagedAttention"): keys and values live in fixed-size blocks of one
preallocated pool; each sequence owns a block table, the list of its blocks in order.

    token t of a sequence  ->  block  table[t // block_size],  slot  t % block_size

A sequence holds ceil(T / block_size) blocks, so at most one block per sequence is partly empty, however long
the sequences are and whatever their lengths. Sequences that share a prompt share its blocks (``fork``): a
reference count says how many tables point at each block; a block returns to the free list when the count
reaches 0, and a sequence that writes into a shared, partly filled block first copies it (copy-on-write).

Shape legend: L layers, N blocks in the pool, Hkv key/value heads, S block size (tokens), Dh head size,
T a sequence's length.
"""

from __future__ import annotations

from numbers import Integral

import torch
from torch import Tensor

from .attention import scaled_dot_product_attention

__all__ = ["PagedKVCache", "OutOfBlocks", "gather_blocks"]


class OutOfBlocks(RuntimeError):
    """The pool has no free block left (a server would make a sequence wait or preempt one)."""


def gather_blocks(pool: Tensor, block_table: Tensor, length: int) -> Tensor:
    """A sequence's first ``length`` tokens read from the pool through its block table.

    Shape:
        pool: (N, Hkv, S, Dh); block_table: (n,) int64, n >= ceil(length / S) -> (Hkv, length, Dh)
    """
    if not isinstance(pool, Tensor) or pool.dim() != 4:
        raise ValueError(f"pool must be a (N, Hkv, S, Dh) tensor, got {getattr(pool, 'shape', type(pool).__name__)}")
    S = pool.size(2)
    if (not isinstance(block_table, Tensor) or block_table.dim() != 1 or block_table.dtype != torch.long
            or isinstance(length, bool) or not isinstance(length, Integral) or not 0 <= length <= S * block_table.numel()):
        raise ValueError(f"need a 1-D int64 block_table with at least ceil(length / {S}) blocks, got "
                         f"{getattr(block_table, 'shape', block_table)!r} and length {length!r}")
    blocks = pool[block_table]                                  # (n, Hkv, S, Dh)
    H, D = pool.size(1), pool.size(3)
    return blocks.transpose(0, 1).reshape(H, -1, D)[:, :length]  # (Hkv, n * S, Dh) -> first `length` tokens


class PagedKVCache:
    """One pool of ``num_blocks`` blocks of ``block_size`` tokens for ``num_layers`` layers, shared by many sequences.

    A block id is the same in every layer (one block table per sequence, as in vLLM). ``add(seq)`` starts an empty
    sequence, ``fork(parent, child)`` starts one that shares all of the parent's blocks, ``append`` writes new
    tokens' keys and values (allocating blocks as needed, copying a shared partly filled last block first),
    ``keys(seq, layer)`` / ``values`` read them back through the block table, ``free(seq)`` releases its blocks.

    Shape:
        pool_k, pool_v: (L, N, Hkv, S, Dh); append k, v: (L, Hkv, Tn, Dh) (or (Hkv, Tn, Dh) for one layer);
        keys(seq, layer): (Hkv, T, Dh)
    """

    def __init__(self, num_blocks: int, block_size: int, num_heads: int, head_dim: int, num_layers: int = 1,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        for name, n in (("num_blocks", num_blocks), ("block_size", block_size), ("num_heads", num_heads),
                        ("head_dim", head_dim), ("num_layers", num_layers)):
            if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        self.block_size, self.num_layers = int(block_size), int(num_layers)
        shape = (num_layers, num_blocks, num_heads, block_size, head_dim)
        self.pool_k = torch.zeros(shape, dtype=dtype, device=device)    # allocated once, never grown
        self.pool_v = torch.zeros(shape, dtype=dtype, device=device)
        self.free_blocks: list[int] = list(range(num_blocks - 1, -1, -1))   # a stack: pop() gives block 0 first
        self.ref_count = [0] * num_blocks
        self.tables: dict = {}                                       # sequence -> list of block ids
        self.lengths: dict = {}                                      # sequence -> tokens written
        self.copies = 0                                              # copy-on-write events so far

    # --- bookkeeping ---------------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.ref_count)

    def block_nbytes(self) -> int:
        """Bytes of one block (keys and values, every layer), read off the pool's storage."""
        return (self.pool_k.untyped_storage().nbytes() + self.pool_v.untyped_storage().nbytes()) // self.num_blocks

    def allocated_nbytes(self) -> int:
        """Bytes of the whole pool: what the cache occupies, used or not."""
        return self.pool_k.untyped_storage().nbytes() + self.pool_v.untyped_storage().nbytes()

    def used_blocks(self) -> int:
        """Blocks referenced by at least one sequence (a shared block counts once)."""
        return self.num_blocks - len(self.free_blocks)               # a block is in use iff it is not free

    def held_nbytes(self, seq=None) -> int:
        """Bytes of the blocks in use (of one sequence's table when ``seq`` is given, shared blocks included)."""
        n = self.used_blocks() if seq is None else len(self._table(seq))
        return n * self.block_nbytes()

    def __contains__(self, seq) -> bool:
        return seq in self.tables

    def block_table(self, seq) -> Tensor:
        """The sequence's block ids in order. Shape: (ceil(T / S),) int64."""
        return torch.tensor(self._table(seq), dtype=torch.long, device=self.pool_k.device)

    def _table(self, seq) -> list[int]:
        if seq not in self.tables:
            raise ValueError(f"unknown sequence {seq!r}; known: {sorted(map(repr, self.tables))}")
        return self.tables[seq]

    def _allocate(self) -> int:
        if not self.free_blocks:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block = self.free_blocks.pop()
        self.ref_count[block] = 1
        return block

    def _release(self, block: int) -> None:
        self.ref_count[block] -= 1
        if self.ref_count[block] == 0:
            self.free_blocks.append(block)

    # --- sequences -----------------------------------------------------------------------------------------
    def add(self, seq) -> None:
        """Start an empty sequence (no block yet)."""
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already exists")
        self.tables[seq], self.lengths[seq] = [], 0

    def fork(self, parent, child) -> None:
        """Start ``child`` as a copy of ``parent`` that shares every block (no keys or values are copied)."""
        table = self._table(parent)
        if child in self.tables:
            raise ValueError(f"sequence {child!r} already exists")
        for block in table:
            self.ref_count[block] += 1
        self.tables[child], self.lengths[child] = list(table), self.lengths[parent]

    def free(self, seq) -> None:
        """Forget a sequence; blocks no other sequence references go back to the free list."""
        for block in self._table(seq):
            self._release(block)
        del self.tables[seq], self.lengths[seq]

    def __len__(self) -> int:
        return len(self.tables)

    def length(self, seq) -> int:
        self._table(seq)
        return self.lengths[seq]

    def reserve(self, seq, new: int) -> int:
        """Make room for ``new`` more tokens (allocate blocks; copy a shared, partly filled last block first) and
        count them as written; return the first new position. :meth:`write` then fills the slots layer by layer."""
        table = self._table(seq)
        if isinstance(new, bool) or not isinstance(new, Integral) or new < 0:
            raise ValueError(f"new must be a non-negative integer, got {new!r}")
        S, start = self.block_size, self.lengths[seq]
        need = -(-(start + new) // S) - len(table)                   # blocks still to allocate
        copy = new > 0 and start % S != 0 and self.ref_count[table[-1]] > 1   # last block shared and partly filled
        if need + copy > len(self.free_blocks):
            raise OutOfBlocks(f"sequence {seq!r} needs {need + copy} more blocks, {len(self.free_blocks)} free")
        if copy:                                                     # copy-on-write before writing into it
            old, table[-1] = table[-1], self._allocate()
            self.pool_k[:, table[-1]] = self.pool_k[:, old]
            self.pool_v[:, table[-1]] = self.pool_v[:, old]
            self._release(old)
            self.copies += 1
        table.extend(self._allocate() for _ in range(need))
        self.lengths[seq] = start + new
        return start

    def write(self, seq, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        """Put the keys and values of tokens start .. start + Tn - 1 (already reserved) into their slots.

        Shape: k, v: (Hkv, Tn, Dh)
        """
        want = (self.pool_k.size(2), self.pool_k.size(4))
        if (not isinstance(k, Tensor) or not isinstance(v, Tensor) or k.dim() != 3 or k.shape != v.shape
                or (k.size(0), k.size(2)) != want):
            raise ValueError(f"k {tuple(getattr(k, 'shape', ()))} and v {tuple(getattr(v, 'shape', ()))} must both "
                             f"be (Hkv, Tn, Dh) with (Hkv, Dh) = {want}")
        if start + k.size(1) > self.length(seq):
            raise ValueError(f"positions {start}..{start + k.size(1) - 1} of {seq!r} are not reserved "
                             f"(length {self.lengths[seq]})")
        S, dev = self.block_size, self.pool_k.device
        pos = torch.arange(start, start + k.size(1))                 # (Tn,) positions of the new tokens
        blocks = torch.tensor(self.tables[seq], dtype=torch.long)[pos // S].to(dev)   # (Tn,) block of each token
        slots = (pos % S).to(dev)                                    # (Tn,) slot inside its block
        # two index tensors around a slice: the indexed view is (Tn, Hkv, Dh)
        self.pool_k[layer, blocks, :, slots] = k.transpose(0, 1)
        self.pool_v[layer, blocks, :, slots] = v.transpose(0, 1)

    def append(self, seq, k: Tensor, v: Tensor) -> None:
        """Write the keys and values of ``Tn`` new tokens at positions T .. T + Tn - 1 of the sequence.

        Shape: k, v: (L, Hkv, Tn, Dh), or (Hkv, Tn, Dh) when the cache has one layer.
        """
        self._table(seq)
        if isinstance(k, Tensor) and isinstance(v, Tensor) and k.dim() == 3 and self.num_layers == 1:
            k, v = k[None], v[None]
        if (not isinstance(k, Tensor) or not isinstance(v, Tensor) or k.dim() != 4 or k.shape != v.shape
                or k.size(0) != self.num_layers):
            raise ValueError(f"k {tuple(getattr(k, 'shape', ()))} and v {tuple(getattr(v, 'shape', ()))} must both "
                             f"be (L={self.num_layers}, Hkv, Tn, Dh)")
        start = self.reserve(seq, k.size(2))
        for layer in range(self.num_layers):
            self.write(seq, layer, start, k[layer], v[layer])

    def keys(self, seq, layer: int = 0) -> Tensor:
        """The sequence's keys in layer ``layer``, read through its block table. Shape: (Hkv, T, Dh)."""
        return gather_blocks(self.pool_k[layer], self.block_table(seq), self.lengths[seq])

    def values(self, seq, layer: int = 0) -> Tensor:
        """The sequence's values in layer ``layer``. Shape: (Hkv, T, Dh)."""
        return gather_blocks(self.pool_v[layer], self.block_table(seq), self.lengths[seq])

    def attend(self, seq, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
        """One layer's cache (L = 1): append k, v, then the new queries attend causally to the whole sequence,
        as :meth:`attnbook.KVCache.attend` does for a contiguous cache.

        Shape: q, k, v: (Hkv, Tn, Dh) -> (Hkv, Tn, Dh)
        """
        if not isinstance(q, Tensor) or not isinstance(k, Tensor) or q.shape != k.shape:
            raise ValueError(f"q {tuple(getattr(q, 'shape', ()))} must have the shape of k {tuple(getattr(k, 'shape', ()))}")
        old = self.length(seq)
        self.append(seq, k, v)
        keys, values = self.keys(seq), self.values(seq)              # (Hkv, T, Dh)
        pos_q = torch.arange(old, old + q.size(1), device=q.device)[:, None]     # (Tn, 1)
        mask = torch.arange(keys.size(1), device=q.device) <= pos_q              # (Tn, T)
        return scaled_dot_product_attention(q, keys, values, mask, scale)[0]

"""Memory traffic of attention: elements moved between main memory (a GPU's HBM) and on-chip memory.

Two ways to count, per (batch, head) problem of T queries, T keys and head size D:

* :func:`hbm_traffic` — the algorithm's count. ``"standard"`` is Algorithm 0 of the FlashAttention
  paper (Dao et al. 2022): read Q, K, write S; read S, write P; read P, V, write O — 4T^2 + 4TD in
  all, Theta(TD + T^2). ``"tiled"`` is the fused tiled loop of :func:`attnbook.tiled_attention`
  run as one kernel: per query block read Q_r once and every key block K_c, V_c it does not skip;
  write O_r and the row logsumexp once; scores never leave the chip. With block size b = M / (4D)
  (Q, K, V and O blocks fill an on-chip memory of M elements) that is Theta(T^2 D^2 / M), the
  paper's Theorem 2.
* :func:`tensor_traffic` — what an unfused PyTorch function moves if every ATen operator is its
  own kernel (as in eager PyTorch on a GPU): each operator reads all its tensor inputs and writes
  its outputs; views move nothing.
"""

from __future__ import annotations

from numbers import Integral
from typing import Callable

import torch

from .efficient import _key_range

__all__ = ["hbm_traffic", "tensor_traffic"]

# aliasing operators that dispatch without being flagged as views, and allocations that write nothing
_NO_TRAFFIC = {"detach", "alias", "lift_fresh", "_unsafe_view", "empty", "empty_like", "new_empty", "empty_strided"}


def _pos(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(n)


def hbm_traffic(method: str, t: int, d: int, block_size: int = 128, causal: bool = False) -> dict[str, int]:
    """Elements read from and written to main memory by one attention forward (one batch entry, one head).

    ``"standard"``: Algorithm 0 (S and P materialised; ``causal`` changes nothing, every score is
    computed). ``"tiled"``: the fused loop of :func:`attnbook.tiled_attention` with square blocks
    of ``block_size``; ``causal`` skips the key blocks above the diagonal, as that loop does.

    Shape:
        T queries and T keys of size d -> {"read": int, "write": int} (elements)
    """
    t, d, block_size = _pos(t, "t"), _pos(d, "d"), _pos(block_size, "block_size")
    if method == "standard":
        steps = [(2 * t * d, t * t),          # S = Q K^T
                 (t * t, t * t),              # P = softmax(S)
                 (t * t + t * d, t * d)]      # O = P V
    elif method == "tiled":
        steps = []
        for qs in range(0, t, block_size):
            qe = min(qs + block_size, t)
            lo, hi = _key_range(qs, qe, t, bool(causal), None)
            keys = hi - (lo - lo % block_size)               # keys of the blocks it reads
            steps.append(((qe - qs) * d + 2 * keys * d,      # Q_r once, K_c and V_c per block
                          (qe - qs) * (d + 1)))              # O_r and the logsumexp once
    else:
        raise ValueError(f"method must be 'standard' or 'tiled', got {method!r}")
    return {"read": sum(r for r, _ in steps), "write": sum(w for _, w in steps)}


def tensor_traffic(fn: Callable, *args, **kwargs) -> dict[str, int]:
    """Bytes read and written by ``fn(*args, **kwargs)`` if each ATen operator were one kernel.

    Every non-view operator reads all its tensor arguments and writes all its tensor results
    (in-place results included); views, other aliasing operators and uninitialised allocations move nothing.

    Shape:
        any -> {"read": int, "write": int} (bytes)
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def nbytes(xs):
        return sum(x.numel() * x.element_size() for x in tree_leaves(xs) if isinstance(x, torch.Tensor))

    total = {"read": 0, "write": 0}

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view and func.overloadpacket.__name__ not in _NO_TRAFFIC:
                total["read"] += nbytes((args, kwargs or {}))
                total["write"] += nbytes(out)
            return out

    with _Count():
        fn(*args, **kwargs)
    return total

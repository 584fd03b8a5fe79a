"""How far information travels through a sequence model, measured two ways.

``jacobian_norms``: ‖∂y/∂x_t‖ for every input position t, where y is one output vector (e.g. the
last hidden state h_T of an RNN, or the last row of a self-attention layer). Its decay with the
distance T - t is what "vanishing gradients" means (Bengio et al., 1994).

``graph_depth``: the number of operations on the longest path from an input to an output in the
autograd graph, i.e. how many operations must run one after another. Parallel hardware can run
independent operations together, never the operations along one path.

Shape legend: B batch, T positions, D input features, H output features.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = ["jacobian_norms", "graph_depth"]


def jacobian_norms(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """Frobenius norms ‖∂fn(x)_b / ∂x_{b,t}‖_F of the (H × D) Jacobian blocks, for every b and t.

    ``fn`` must treat the samples of a batch independently (no batch norm, no mixing across b).
    All H rows of each Jacobian come from one backward pass, by repeating every sample H times
    and back-propagating the H unit vectors.

    Shape:
        x: (B, T, D); fn: (B', T, D) -> (B', H) for any B' -> norms (B, T).
    """
    if not isinstance(x, Tensor) or x.dim() != 3 or not x.is_floating_point():
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating tensor of shape (B, T, D), got {got}")
    b = x.size(0)
    with torch.no_grad():
        probe = fn(x[:1])
    if probe.dim() != 2 or probe.size(0) != 1:
        raise ValueError(f"fn must map (B, T, D) to (B, H); on (1, T, D) it gave {tuple(probe.shape)}")
    h = probe.size(1)
    xr = x.detach().repeat_interleave(h, dim=0).requires_grad_(True)  # (B*H, T, D): H copies per sample
    out = fn(xr)                                                        # (B*H, H)
    eye = torch.eye(h, dtype=out.dtype, device=out.device).repeat(b, 1)  # (B*H, H): copy i gets e_i
    (grad,) = torch.autograd.grad(out, xr, eye)                          # row i of each Jacobian
    return grad.reshape(b, h, *x.shape[1:]).pow(2).sum(dim=(1, 3)).sqrt()  # (B, H, T, D) -> (B, T)


def graph_depth(output: Tensor, inp: Tensor) -> int:
    """Longest chain of autograd operations from the leaf ``inp`` to ``output`` (0 if output is inp).

    Counts the nodes of ``output.grad_fn``'s graph on the longest path that ends at ``inp``'s
    gradient accumulator. Raises ValueError when output does not depend on inp.

    Shape: any; ``inp`` must be a leaf tensor with requires_grad=True.
    """
    if not (isinstance(inp, Tensor) and inp.is_leaf and inp.requires_grad):
        raise ValueError("inp must be a leaf tensor with requires_grad=True")
    if output is inp:
        return 0
    if output.grad_fn is None:
        raise ValueError("output has no autograd graph (computed without gradients?)")
    depth: dict = {}  # node -> longest path to inp in nodes, or None when inp is unreachable
    stack = [(output.grad_fn, False)]
    while stack:  # iterative post-order: graphs of long recurrences are deeper than Python's stack
        node, expanded = stack.pop()
        if node in depth:
            continue
        children = [c for c, _ in node.next_functions if c is not None]
        if getattr(node, "variable", None) is inp:
            depth[node] = 0
        elif not expanded:
            stack.append((node, True))
            stack.extend((c, False) for c in children if c not in depth)
        else:
            reach = [depth[c] for c in children if depth.get(c) is not None]
            depth[node] = 1 + max(reach) if reach else None
    if depth[output.grad_fn] is None:
        raise ValueError("output does not depend on inp")
    return depth[output.grad_fn]

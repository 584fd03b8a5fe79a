"""Muon: momentum whose update for each weight matrix is orthogonalised (Jordan et al., 2024).

    B_t = mu B_{t-1} + G_t                               momentum buffer (G_t: the gradient)
    M_t = G_t + mu B_t  (Nesterov)   or   B_t
    O_t = NS_k(M_t) ~ U V^T  where M_t = U S V^T         all singular values pushed towards 1
    W_t = W_{t-1} - lr * 0.2 sqrt(max(A, B)) * O_t      W: (A, B); the factor gives the update AdamW's RMS

Orthogonalising makes every direction of the update the same size, so rare directions of the gradient
move as fast as the dominant ones. Muon is for the 2-D weights of hidden layers; embeddings, the output
layer, biases and norms stay with AdamW (:func:`muon_param_groups` splits a model's parameters).
The learning-rate factor is Moonshot's (Liu et al., 2025), so ``lr`` can be AdamW's.

Shape legend: A, B the two sides of a weight matrix.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import Tensor, nn

__all__ = ["newton_schulz", "Muon", "muon_param_groups"]

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # quintic iteration tuned for speed (Jordan et al., 2024)


def newton_schulz(g: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """Approximately U V^T for g = U S V^T, by ``steps`` quintic Newton–Schulz iterations.

    X <- a X + (b X X^T + c (X X^T)^2) X after scaling X to Frobenius norm 1 (so every singular value
    is <= 1). The coefficients favour speed: singular values end near 1 (about 0.7–1.2), not exactly 1.
    Runs in float32 or better. Shape: (A, B) -> (A, B).
    """
    if not isinstance(g, Tensor) or g.dim() != 2 or not g.is_floating_point():
        got = f"{g.dtype} {tuple(g.shape)}" if isinstance(g, Tensor) else type(g).__name__
        raise ValueError(f"newton_schulz needs a 2-D floating-point matrix, got {got}")
    if isinstance(steps, bool) or not isinstance(steps, Integral) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    a, b, c = NS_COEFFICIENTS
    x = g.float() if g.dtype in (torch.float16, torch.bfloat16) else g
    wide = x.size(0) <= x.size(1)
    x = x if wide else x.T                                   # iterate on the (short, long) side: X X^T is small
    x = x / x.norm().clamp_min(eps)                          # a new tensor: g is never written to
    for _ in range(steps):
        gram = x @ x.T                                       # (min(A, B), min(A, B))
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x if wide else x.T).to(g.dtype)


class Muon(torch.optim.Optimizer):
    """Muon for 2-D parameters (see the module docstring); ``lr`` on AdamW's scale.

    Shape: every parameter (A, B).
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.95, nesterov: bool = True,
                 weight_decay: float = 0.0, ns_steps: int = 5):
        for name, v in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if isinstance(v, bool) or not isinstance(v, Real) or not 0 <= v < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not momentum < 1:
            raise ValueError(f"momentum must be < 1, got {momentum!r}")
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, Integral) or ns_steps < 1:
            raise ValueError(f"ns_steps must be a positive integer, got {ns_steps!r}")
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=bool(nesterov),
                                      weight_decay=weight_decay, ns_steps=ns_steps))
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError(f"Muon takes 2-D weight matrices only, got a parameter of shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, mu = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(mu).add_(p.grad)                                    # B_t = mu B_{t-1} + G_t
                m = p.grad + mu * buf if group["nesterov"] else buf
                p.mul_(1 - lr * group["weight_decay"])                       # decoupled weight decay
                p.add_(newton_schulz(m, group["ns_steps"]), alpha=-lr * 0.2 * math.sqrt(max(p.shape)))
        return loss


def muon_param_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(weights for Muon, the rest for AdamW): Muon gets every 2-D weight except embeddings (and any
    parameter shared with one, such as a tied output layer); AdamW gets embeddings, biases and norms."""
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    muon, rest = [], []
    for p in model.parameters():                           # each shared parameter once
        (muon if p.dim() == 2 and id(p) not in embedding_ids else rest).append(p)
    return muon, rest

"""Training utilities any chapter can reuse: label smoothing, warm-up schedules, gradient clipping,
teacher forcing, and a small training loop that prints its progress to stdout.

Shape legend: N predictions, V classes (vocabulary), B batch, T target steps.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from numbers import Real

import torch
from torch import Tensor, nn

from .softmax import log_softmax

__all__ = ["label_smoothed_cross_entropy", "teacher_forcing_loss", "noam_lr", "warmup_linear_decay_lr",
           "clip_grad_norm", "fit"]


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, smoothing: float = 0.0,
                                 ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    """Cross-entropy against q = (1 - eps) onehot(y) + eps / V (Szegedy et al., 2016).

    Formula: loss = -sum_k q_k log p_k = (1 - eps)(-log p_y) + eps * mean_k(-log p_k)
    Targets equal to ``ignore_index`` contribute nothing; "mean" averages over the others
    (the convention of torch.nn.functional.cross_entropy).

    Shape:
        logits: (N, V); target: (N,) int64 -> () for "mean"/"sum", (N,) for "none".
    """
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"logits {tuple(logits.shape)} and target {tuple(target.shape)} must be (N, V) and (N,)")
    if isinstance(smoothing, bool) or not isinstance(smoothing, Real) or not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"smoothing must be a number in [0, 1], got {smoothing!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    keep = torch.ones_like(target, dtype=torch.bool) if ignore_index is None else target != ignore_index
    logp = log_softmax(logits, -1)                                     # (N, V)
    nll = -logp.gather(1, target.masked_fill(~keep, 0)[:, None]).squeeze(1)   # (N,) -log p_y
    uniform = -logp.mean(-1)                                           # (N,) mean_k -log p_k
    loss = ((1.0 - smoothing) * nll + smoothing * uniform) * keep     # ignored rows -> 0
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / keep.sum().clamp_min(1)


def teacher_forcing_loss(model: nn.Module, src: Tensor, tgt: Tensor, smoothing: float = 0.0,
                         pad_id: int = 0) -> Tensor:
    """Teacher forcing: the decoder reads the true target shifted right, all positions in one call.

    ``tgt`` = <bos> y_1 ... y_n <eos> <pad>...; input tgt[:, :-1] and labels tgt[:, 1:], so position t
    (from 1) reads <bos> y_1 ... y_{t-1} and is scored on y_t. Works for any model(src, tgt_in) -> logits.

    Shape:
        src: (B, S); tgt: (B, T + 1) -> scalar mean over non-pad labels.
    """
    logits = model(src, tgt[:, :-1])                                   # (B, T, V), one forward pass
    labels = tgt[:, 1:]                                                # (B, T)
    return label_smoothed_cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                        smoothing, ignore_index=pad_id)   # (B*T, V), (B*T,)


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's schedule (Vaswani et al., 2017, eq. 3), counting steps from 1.

    Formula: lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5);
    linear growth for step < warmup, peak factor * (d_model * warmup)^-0.5 at step = warmup, then ~ step^-0.5.
    """
    if step < 1 or warmup < 1 or d_model < 1:
        raise ValueError(f"need step >= 1, warmup >= 1, d_model >= 1, got {step}, {warmup}, {d_model}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def warmup_linear_decay_lr(step: int, peak: float, warmup: int, total: int, final: float = 0.0) -> float:
    """Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then linear decay to ``final`` at ``total``.

    Formula: lr = peak * step / warmup for step <= warmup;
             lr = final + (peak - final) * (total - step) / (total - warmup) afterwards (clamped at final).
    """
    if not 0 <= warmup < total or step < 0:
        raise ValueError(f"need 0 <= warmup < total and step >= 0, got warmup={warmup}, total={total}, step={step}")
    if step < warmup:
        return peak * step / warmup
    return final + (peak - final) * max(0.0, (total - step) / (total - warmup))


def _global_norm(grads: list[Tensor]) -> Tensor:
    """sqrt(sum_p ||g_p||^2) over all gradients, as one scalar tensor."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float) -> Tensor:
    """Rescale all gradients together so that their global L2 norm is at most ``max_norm``.

    Formula: n = sqrt(sum_p ||g_p||^2);  g_p <- g_p * min(1, max_norm / (n + 1e-6))
    The direction of the full gradient is unchanged (Pascanu et al., 2013). Returns n before clipping.
    """
    if isinstance(max_norm, bool) or not isinstance(max_norm, Real) or not max_norm > 0:
        raise ValueError(f"max_norm must be a number > 0, got {max_norm!r}")
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = _global_norm(grads)
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.device, g.dtype))
    return norm


def fit(model: nn.Module, batch_fn: Callable[[int], tuple], loss_fn: Callable[..., Tensor],
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer], steps: int,
        lr_schedule: Callable[[int], float] | None = None, max_grad_norm: float | None = None,
        log_every: int = 0, out=None) -> dict[str, list]:
    """A plain training loop: batch -> loss -> backward -> clip -> step, with a progress line.

    ``batch_fn(step)`` returns a tuple of tensors (moved to the model's device);
    ``loss_fn(model, *batch)`` returns a scalar. ``optimizer`` may be several (e.g. Muon for the hidden
    matrices, AdamW for the rest), all stepped after each backward pass. ``lr_schedule(step)`` (steps from 1)
    sets every parameter group's learning rate before the update, times the group's ``lr_scale`` (default 1).
    Every ``log_every`` steps (0 = never) a line goes to ``out`` (default: the current sys.stdout; the book's
    build fails on anything on stderr).

    Returns {"loss", "lr" (the first group's), "grad_norm" (before clipping), "seconds" (since the start)},
    one entry per step.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    optimizers = list(optimizer) if isinstance(optimizer, Sequence) else [optimizer]
    if not optimizers or not all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
        raise ValueError(f"optimizer must be a torch optimizer or a non-empty list of them, got {optimizer!r}")
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    hist: dict[str, list] = {"loss": [], "lr": [], "grad_norm": [], "seconds": []}
    model.train()
    start = time.perf_counter()
    for step in range(1, steps + 1):
        if lr_schedule is not None:
            lr = lr_schedule(step)
            for group in (g for o in optimizers for g in o.param_groups):
                group["lr"] = lr * group.get("lr_scale", 1.0)
        batch = tuple(x.to(device) for x in batch_fn(step))
        loss = loss_fn(model, *batch)
        for o in optimizers:
            o.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            norm = clip_grad_norm(params, max_grad_norm)
        else:
            norm = _global_norm([p.grad for p in params if p.grad is not None])
        for o in optimizers:
            o.step()
        hist["loss"].append(loss.item())
        hist["lr"].append(optimizers[0].param_groups[0]["lr"])
        hist["grad_norm"].append(float(norm))
        hist["seconds"].append(time.perf_counter() - start)
        if log_every and (step % log_every == 0 or step == steps):
            recent = hist["loss"][-log_every:]
            bar = "#" * round(20 * step / steps)
            print(f"[{bar:<20}] 第 {step}/{steps} 步  损失 {sum(recent) / len(recent):.4f}  "
                  f"学习率 {hist['lr'][-1]:.2e}  梯度范数 {hist['grad_norm'][-1]:.2f}  {hist['seconds'][-1]:.1f} 秒",
                  file=out or sys.stdout, flush=True)
    model.eval()
    return hist

"""Softmax and its relatives: stable, masked, top-k, sparse, and their calculus.

Every function normalises along one dimension ``dim`` and keeps all other
dimensions as they are. float16 and bfloat16 inputs are computed in float32
and returned in the input dtype; ``naive_softmax`` is the one exception.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor

__all__ = [
    "naive_softmax",
    "softmax",
    "logsumexp",
    "log_softmax",
    "cross_entropy",
    "masked_softmax",
    "topk_softmax",
    "sparsemax",
    "entmax15",
    "softmax_jacobian",
    "entropy",
]


def _check(x: Tensor, dim: int, name: str = "x") -> int:
    """Validate a floating tensor and a non-empty dim; return dim as non-negative."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(
            f"{name} has dtype {x.dtype}; softmax needs a floating-point tensor"
        )
    if x.dim() == 0:
        raise ValueError(f"{name} is a 0-d tensor; it needs at least one dimension")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim!r} is out of range for {name} of shape {tuple(x.shape)}")
    dim %= x.dim()
    if x.size(dim) == 0:
        raise ValueError(f"{name} of shape {tuple(x.shape)} is empty along dim={dim}")
    return dim


def _up(x: Tensor) -> Tensor:
    # Half-precision types are computed in float32 (as Hugging Face does).
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _safe_max(x: Tensor, dim: int) -> Tensor:
    """Max along dim (keepdim), with non-finite maxima replaced by 0.

    Detached: the results below are mathematically independent of the shift.
    """
    m = x.detach().amax(dim, keepdim=True)
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def naive_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Textbook softmax exp(x) / sum(exp(x)), UNSTABLE on purpose.

    No max subtraction and no upcast: exp overflows to inf as soon as an entry
    exceeds log(finfo.max) (about 88.7 in float32, 11.1 in float16), and the
    result becomes nan. It exists to show why :func:`softmax` subtracts the max.

    Formula: p_i = exp(x_i) / sum_j exp(x_j)

    Shape:
        x: (..., n, ...) -> (..., n, ...), same dtype.
    """
    dim = _check(x, dim)
    e = torch.exp(x)
    return e / e.sum(dim, keepdim=True)


def softmax(x: Tensor, dim: int = -1, temperature: float = 1.0) -> Tensor:
    """Numerically stable softmax with temperature τ (``temperature``): softmax(x / τ).

    Formula: p_i = exp((x_i - m) / τ) / sum_j exp((x_j - m) / τ),  m = max_j x_j

    Shift invariance makes the max subtraction exact; after it every exponent
    is <= 0, so exp cannot overflow and the largest term is exactly 1. Any
    finite input in the dtype's range gives a finite result. Rows containing
    +inf or only -inf give nan, as in torch; use :func:`masked_softmax` for
    masking instead of -inf scores.

    Shape:
        x: (..., n, ...) -> (..., n, ...), same dtype.
    """
    dim = _check(x, dim)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, Real)
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    z = _up(x)
    # Divide after subtracting: x / τ alone could overflow for τ < 1.
    z = (z - _safe_max(z, dim)) / temperature
    e = torch.exp(z)
    return (e / e.sum(dim, keepdim=True)).to(x.dtype)


def _logsumexp_shifted(z: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Return (z - m, log sum exp(z - m)) with keepdim, m the safe max."""
    zs = z - _safe_max(z, dim)
    return zs, torch.log(torch.exp(zs).sum(dim, keepdim=True))


def logsumexp(x: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """Stable log(sum(exp(x))) along dim.

    Formula: lse(x) = m + log sum_j exp(x_j - m),  m = max_j x_j

    All -inf gives -inf and any +inf gives +inf, as in torch.logsumexp.

    Shape:
        x: (..., n, ...) -> (..., ...) or (..., 1, ...) with keepdim.
    """
    dim = _check(x, dim)
    z = _up(x)
    m = _safe_max(z, dim)
    out = m + torch.log(torch.exp(z - m).sum(dim, keepdim=True))
    if not keepdim:
        out = out.squeeze(dim)
    return out.to(x.dtype)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Stable log of softmax: x - logsumexp(x).

    Formula: log p_i = (x_i - m) - log sum_j exp(x_j - m)

    Computed from the shifted x_i - m rather than x_i - lse(x), which would lose
    digits to cancellation when |x| is large.

    Shape:
        x: (..., n, ...) -> (..., n, ...), same dtype.
    """
    dim = _check(x, dim)
    zs, lse = _logsumexp_shifted(_up(x), dim)
    return (zs - lse).to(x.dtype)


def cross_entropy(logits: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy fused through the log domain: -log softmax(z)_y.

    Formula: loss = logsumexp(z) - z_y;  d loss / dz = softmax(z) - onehot(y)

    Never forms log(softmax(z)), which is -inf once p_y underflows to 0.

    Shape:
        logits: (..., n); target: (...) int64 class indices in [0, n)
        -> () for reduction "mean" or "sum", (...) for "none"; logits' dtype.
    """
    dim = _check(logits, -1, "logits")
    if not isinstance(target, Tensor) or target.dtype != torch.int64:
        got = target.dtype if isinstance(target, Tensor) else type(target).__name__
        raise ValueError(f"target must be an int64 tensor of class indices, got {got}")
    if target.shape != logits.shape[:-1]:
        raise ValueError(f"target of shape {tuple(target.shape)} does not match logits of "
                         f"shape {tuple(logits.shape)} without the last (class) dimension")
    n = logits.size(-1)
    if target.numel() and not bool(((target >= 0) & (target < n)).all()):
        raise ValueError(f"target values must lie in [0, {n}), got min {int(target.min())}, "
                         f"max {int(target.max())}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    zs, lse = _logsumexp_shifted(_up(logits), dim)
    loss = (lse - zs.gather(dim, target.unsqueeze(dim))).squeeze(dim)  # the shift m cancels
    if reduction != "none":
        loss = loss.mean() if reduction == "mean" else loss.sum()
    return loss.to(logits.dtype)


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over the kept entries only; masked entries are exactly 0.

    ``mask`` is a torch.bool tensor, True = keep (may attend), broadcastable to
    ``scores.shape`` without changing that shape (e.g. a key-padding mask of
    shape (B, 1, T) against scores of shape (B, T, T)). A slice along dim with
    nothing kept gives all zeros, not nan and not a uniform average, and its
    gradient is zero. No -1e9 constants and no -inf ever reach exp.

    Formula: p_i = mask_i exp(x_i - m) / sum_j mask_j exp(x_j - m),
             m = max over kept j of x_j; p = 0 where no j is kept.

    Shape:
        scores: (..., n, ...); mask: broadcastable to scores -> scores' shape, dtype.
    """
    dim = _check(scores, dim, "scores")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a torch.bool tensor (True = keep), got {got}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        shape = None
    if shape != scores.shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to scores of "
            f"shape {tuple(scores.shape)}"
        )
    mask = mask.expand(scores.shape)
    x = _up(scores)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    # Max over kept entries only; 0 where nothing is kept (shift is arbitrary).
    m = _safe_max(torch.where(mask, x, -math.inf), dim)
    # Masked scores become 0 before exp, so exp never sees -inf or overflow.
    e = torch.exp(torch.where(mask, x - m, zero)) * mask
    s = e.sum(dim, keepdim=True)
    # s >= 1 wherever a finite score is kept; s == 0 only for an empty row.
    return (e / torch.where(s > 0, s, torch.ones_like(s))).to(scores.dtype)


def topk_softmax(x: Tensor, k: int, dim: int = -1) -> Tensor:
    """Softmax over the k largest entries along dim, zeros elsewhere.

    Ties at the k-th value are broken as torch.topk breaks them.

    Formula: p_i = exp(x_i) / sum_{j in top-k} exp(x_j) for i in top-k, else 0

    Shape:
        x: (..., n, ...) -> (..., n, ...), same dtype; 1 <= k <= n.
    """
    dim = _check(x, dim)
    n = x.size(dim)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k={k!r} must be an integer with 1 <= k <= x.size({dim}) = {n}")
    z = _up(x)
    vals, idx = z.topk(k, dim)
    p = softmax(vals, dim)
    return torch.zeros_like(z).scatter(dim, idx, p).to(x.dtype)


def _sorted_desc(z: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Sort descending along dim; also return ranks 1..n shaped to broadcast."""
    zs, _ = torch.sort(z, dim=dim, descending=True)
    shape = [1] * z.dim()
    shape[dim] = z.size(dim)
    rho = torch.arange(1, z.size(dim) + 1, dtype=z.dtype, device=z.device).view(shape)
    return zs, rho


def sparsemax(x: Tensor, dim: int = -1) -> Tensor:
    """Sparsemax (Martins & Astudillo, 2016): Euclidean projection onto the simplex.

    Formula: p_i = max(x_i - theta, 0), theta such that sum_i p_i = 1;
             with x sorted descending, support size K = max{k : 1 + k x_(k) > sum_{j<=k} x_(j)}
             and theta = (sum_{j<=K} x_(j) - 1) / K.

    Exact (sort-based); differentiable through autograd, whose gradient equals
    the closed form (identity minus mean on the support, 0 off it).

    Shape:
        x: (..., n, ...) -> (..., n, ...), same dtype.
    """
    dim = _check(x, dim)
    z = _up(x)
    z = z - z.detach().amax(dim, keepdim=True)  # shift-invariant; keeps cumsums small
    zs, rho = _sorted_desc(z, dim)
    cs = zs.cumsum(dim)
    with torch.no_grad():
        support = (1 + rho * zs > cs).sum(dim, keepdim=True)  # K >= 1
    theta = (cs.gather(dim, support - 1) - 1) / support.to(z.dtype)
    return torch.relu(z - theta).to(x.dtype)


def entmax15(x: Tensor, dim: int = -1) -> Tensor:
    """1.5-entmax (Peters, Niculae & Martins, 2019), exact sort-based algorithm.

    Formula: p_i = max(x_i / 2 - theta, 0)^2, theta such that sum_i p_i = 1.
    With z = x/2 sorted descending and the first k entries in the support,
    sum_{j<=k} (z_(j) - theta)^2 = 1 gives theta_k = mean_k - sqrt((1 - ss_k) / k),
    ss_k = sum_{j<=k} (z_(j) - mean_k)^2; the support is the largest k with
    theta_k <= z_(k).

    Differentiable through autograd: theta is recomputed from the selected
    support only, so no sqrt(0) of an unused candidate enters the gradient.

    Shape:
        x: (..., n, ...) -> (..., n, ...), same dtype.
    """
    dim = _check(x, dim)
    z = _up(x) / 2
    z = z - z.detach().amax(dim, keepdim=True)  # shift-invariant
    zs, rho = _sorted_desc(z, dim)
    with torch.no_grad():
        mean = zs.cumsum(dim) / rho
        ss = (zs**2).cumsum(dim) - rho * mean**2
        theta_all = mean - torch.sqrt(torch.clamp((1 - ss) / rho, min=0))
        support = (theta_all <= zs).sum(dim, keepdim=True)  # K >= 1
    k = support.to(z.dtype)
    mean_k = zs.cumsum(dim).gather(dim, support - 1) / k
    ss_k = (zs**2).cumsum(dim).gather(dim, support - 1) - k * mean_k**2
    # 1 - ss_k > 0 on the true support; clamp only guards rounding.
    tau = mean_k - torch.sqrt(torch.clamp((1 - ss_k) / k, min=torch.finfo(z.dtype).tiny))
    return (torch.relu(z - tau) ** 2).to(x.dtype)


def softmax_jacobian(p: Tensor) -> Tensor:
    """Jacobian of softmax at probabilities p: J_ij = dp_i / dz_j.

    Formula: J = diag(p) - p p^T

    Shape:
        p: (..., n) -> (..., n, n), same dtype.
    """
    _check(p, -1, "p")
    q = _up(p)
    return (torch.diag_embed(q) - q.unsqueeze(-1) * q.unsqueeze(-2)).to(p.dtype)


def entropy(p: Tensor, dim: int = -1) -> Tensor:
    """Shannon entropy in nats, with 0 log 0 = 0.

    Formula: H(p) = -sum_i p_i log p_i

    Exact zeros contribute 0 to the value and 0 (not nan) to the gradient.
    p is assumed non-negative; it is not checked.

    Shape:
        p: (..., n, ...) -> (..., ...), same dtype.
    """
    dim = _check(p, dim, "p")
    q = _up(p)
    # log(1) = 0 where p == 0, so neither the value nor the gradient sees log 0.
    safe = torch.where(q > 0, q, torch.ones_like(q))
    return (-(q * torch.log(safe)).sum(dim)).to(p.dtype)

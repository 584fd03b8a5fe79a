"""Linear attention (Katharopoulos et al., 2020): a kernel instead of the softmax, and attention as an RNN.

Replace exp(q.k) by a feature map, sim(q, k) = phi(q) . phi(k) with phi(x) = elu(x) + 1 > 0. Then

    out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j)
          = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))

and the bracketed sums can be formed once: O(T D Dv) instead of O(T^2 D). In the causal case the sums
run over j <= i and are a recurrence with a fixed-size state (an RNN):

    S_i = S_{i-1} + phi(k_i) v_i^T   (D x Dv),   z_i = z_{i-1} + phi(k_i)   (D,)
    out_i = phi(q_i)^T S_i / phi(q_i)^T z_i

Three equal ways to compute the causal form: quadratic with a mask, the recurrence, and chunked
(quadratic inside a chunk, the recurrence across chunks). Shapes (..., T, D) as in attention.py.
"""

from __future__ import annotations

from numbers import Integral

import torch
import torch.nn.functional as F
from torch import Tensor

from .masks import causal_mask

__all__ = [
    "elu_feature_map",
    "linear_attention_quadratic",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "linear_attention_noncausal",
    "attention_flops",
]


def elu_feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1, positive everywhere so the normaliser phi(q).sum phi(k) is > 0.

    Shape:
        x: (...) -> (...)
    """
    return F.elu(x) + 1


def _check(q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 2:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a floating tensor of shape (..., T, D), got {got}")
    if q.size(-1) != k.size(-1) or k.size(-2) != v.size(-2) or k.shape[:-2] != v.shape[:-2] \
            or q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} must be (..., Tq, D), "
                         f"(..., Tk, D), (..., Tk, Dv) with the same leading dimensions")


def _check_causal(q, k) -> None:
    if q.size(-2) != k.size(-2):
        raise ValueError(f"causal linear attention needs Tq = Tk, got q {tuple(q.shape)} and k {tuple(k.shape)}")


def linear_attention_quadratic(q: Tensor, k: Tensor, v: Tensor, causal: bool = True,
                               feature_map=elu_feature_map) -> Tensor:
    """The T x T matrix A = phi(Q) phi(K)^T (lower triangle when causal), rows normalised, times V.

    Formula: A_ij = phi(q_i).phi(k_j) [j <= i];  out = (A V) / rowsum(A)

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); v: (..., Tk, Dv) -> (..., Tq, Dv)
    """
    _check(q, k, v)
    fq, fk = feature_map(q), feature_map(k)
    a = fq @ fk.transpose(-2, -1)                                  # (..., Tq, Tk)
    if causal:
        _check_causal(q, k)
        a = a * causal_mask(q.size(-2), device=q.device)           # zero out keys j > i
    return (a @ v) / a.sum(-1, keepdim=True)                       # (..., Tq, Dv)


def linear_attention_recurrent(q: Tensor, k: Tensor, v: Tensor, state: tuple[Tensor, Tensor] | None = None,
                               feature_map=elu_feature_map) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Causal linear attention one token at a time, with the fixed-size state (S, z) of an RNN.

    Formula: S_i = S_{i-1} + phi(k_i) v_i^T;  z_i = z_{i-1} + phi(k_i);  out_i = phi(q_i)^T S_i / phi(q_i)^T z_i
    ``state`` continues from an earlier call (zeros if None); the state returned is (S_T, z_T).

    Shape:
        q, k: (..., T, D); v: (..., T, Dv); state: S (..., D, Dv), z (..., D)
        -> output (..., T, Dv), state (S (..., D, Dv), z (..., D))
    """
    _check(q, k, v)
    _check_causal(q, k)
    fq, fk = feature_map(q), feature_map(k)
    lead, D, Dv = q.shape[:-2], q.size(-1), v.size(-1)
    if state is None:
        S, z = q.new_zeros(*lead, D, Dv), q.new_zeros(*lead, D)
    else:
        S, z = state
        if S.shape != (*lead, D, Dv) or z.shape != (*lead, D):
            raise ValueError(f"state shapes S {tuple(S.shape)}, z {tuple(z.shape)} must be "
                             f"{(*lead, D, Dv)} and {(*lead, D)}")
    outs = []
    for i in range(q.size(-2)):
        S = S + fk[..., i, :, None] * v[..., i, None, :]          # (..., D, 1) * (..., 1, Dv): outer product
        z = z + fk[..., i, :]                                       # (..., D)
        num = (fq[..., i, None, :] @ S).squeeze(-2)                # (..., 1, D) @ (..., D, Dv) -> (..., Dv)
        den = (fq[..., i, :] * z).sum(-1, keepdim=True)            # (..., 1)
        outs.append(num / den)
    return torch.stack(outs, dim=-2), (S, z)                       # (..., T, Dv)


def linear_attention_chunked(q: Tensor, k: Tensor, v: Tensor, chunk_size: int = 64,
                             feature_map=elu_feature_map) -> Tensor:
    """Causal linear attention chunk by chunk: the masked quadratic form inside a chunk, the state across.

    For a chunk c of queries/keys (rows start..end) and the state (S, z) of all earlier chunks:
        A = phi(Q_c) phi(K_c)^T, lower triangle;   num = phi(Q_c) S + A V_c;   den = phi(Q_c) z + rowsum(A)
        then S += phi(K_c)^T V_c,  z += colsum(phi(K_c)).
    Cost O(T C D) within chunks plus O(T D Dv) for the state: matmuls instead of a T-step loop.

    Shape:
        q, k: (..., T, D); v: (..., T, Dv) -> (..., T, Dv)
    """
    _check(q, k, v)
    _check_causal(q, k)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    fq, fk = feature_map(q), feature_map(k)
    lead, T, D, Dv = q.shape[:-2], q.size(-2), q.size(-1), v.size(-1)
    S, z = q.new_zeros(*lead, D, Dv), q.new_zeros(*lead, D)
    outs = []
    for start in range(0, T, chunk_size):
        end = min(start + chunk_size, T)
        qc, kc, vc = fq[..., start:end, :], fk[..., start:end, :], v[..., start:end, :]
        a = (qc @ kc.transpose(-2, -1)) * causal_mask(end - start, device=q.device)   # (..., C, C)
        num = qc @ S + a @ vc                                      # (..., C, Dv): past chunks + this chunk
        den = qc @ z.unsqueeze(-1) + a.sum(-1, keepdim=True)      # (..., C, 1)
        outs.append(num / den)
        S = S + kc.transpose(-2, -1) @ vc                          # (..., D, C) @ (..., C, Dv)
        z = z + kc.sum(-2)                                          # (..., D)
    return torch.cat(outs, dim=-2)


def linear_attention_noncausal(q: Tensor, k: Tensor, v: Tensor, feature_map=elu_feature_map) -> Tensor:
    """Non-causal linear attention as phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1): no T x T matrix.

    Cost O((Tq + Tk) D Dv). (The causal form: :func:`linear_attention_chunked`.)

    Shape:
        q: (..., Tq, D); k: (..., Tk, D); v: (..., Tk, Dv) -> (..., Tq, Dv)
    """
    _check(q, k, v)
    fq, fk = feature_map(q), feature_map(k)
    kv = fk.transpose(-2, -1) @ v                                   # (..., D, Dv): sum_j phi(k_j) v_j^T
    z = fk.sum(-2)                                                  # (..., D):     sum_j phi(k_j)
    return (fq @ kv) / (fq @ z.unsqueeze(-1))                       # (..., Tq, Dv) / (..., Tq, 1)


def attention_flops(T: int, D: int, Dv: int, chunk_size: int = 64) -> dict[str, int]:
    """Matmul FLOPs (2 x multiply-adds) for one sequence and head: softmax attention vs linear attention.

    softmax (scaled_dot_product_attention, T x T scores):  2 T^2 (D + Dv)
    linear, non-causal (phi(K)^T V, phi(Q) kv, phi(Q) z):   2 (2 T D Dv + T D)
    linear, causal chunked, chunks of C_c tokens:           2 sum_c (C_c^2 (D + Dv) + 2 C_c D Dv + C_c D)
    Quadratic in T for softmax, linear in T (for a fixed chunk size) for linear attention.

    Shape:
        -> {"softmax": int, "linear": int, "chunked": int}
    """
    for name, n in (("T", T), ("D", D), ("Dv", Dv), ("chunk_size", chunk_size)):
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    sizes = [min(chunk_size, T - s) for s in range(0, T, chunk_size)]
    chunked = sum(c * c * (D + Dv) + 2 * c * D * Dv + c * D for c in sizes)
    return {"softmax": 2 * T * T * (D + Dv), "linear": 2 * (2 * T * D * Dv + T * D), "chunked": 2 * chunked}

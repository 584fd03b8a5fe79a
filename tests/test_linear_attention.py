"""Linear attention: the quadratic, recurrent and chunked causal forms and the non-causal form equal a
plain Python-loop reference (float64 to 1e-10, float32 to 1e-6).

Breaks seen to fail: the chunk mask strict (tril(-1): a token misses itself); the state not carried across
chunks; the recurrent form without its normaliser; the non-causal form summing phi(k) over the wrong axis;
phi = elu (no + 1); the chunked FLOP formula without the q.z matmul (C_c D).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from torch.utils.flop_counter import FlopCounterMode

from attnbook import linear_attention as la
from attnbook import scaled_dot_product_attention


def _reference(q, k, v, causal):
    """out_i = sum_j sim(q_i, k_j) v_j / sum_j sim(q_i, k_j), sim = (elu+1)(q).(elu+1)(k), with Python loops."""
    B, H, T, D = q.shape
    out = torch.zeros(B, H, q.size(2), v.size(3), dtype=torch.float64)
    phi = lambda x: [math.exp(t) if t < 0 else t + 1.0 for t in x.tolist()]  # noqa: E731 (elu(x)+1)
    for b in range(B):
        for h in range(H):
            for i in range(q.size(2)):
                fq = phi(q[b, h, i])
                num, den = [0.0] * v.size(3), 0.0
                for j in range(k.size(2) if not causal else i + 1):
                    s = sum(a * c for a, c in zip(fq, phi(k[b, h, j])))
                    den += s
                    num = [n + s * x for n, x in zip(num, v[b, h, j].tolist())]
                out[b, h, i] = torch.tensor(num, dtype=torch.float64) / den
    return out


def _qkv(dtype, t=9, tk=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    tk = t if tk is None else tk
    return (torch.randn(2, 2, t, 4, generator=g, dtype=dtype), torch.randn(2, 2, tk, 4, generator=g, dtype=dtype),
            torch.randn(2, 2, tk, 3, generator=g, dtype=dtype))


def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 5, 101, dtype=torch.float64)
    torch.testing.assert_close(la.elu_feature_map(x), torch.where(x > 0, x + 1, torch.exp(x)), rtol=0, atol=1e-15)
    assert bool((la.elu_feature_map(x) > 0).all())   # (in float64 down to x ~ -36: exp(x) - 1 + 1 rounds to 0 below)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-6)])
def test_three_causal_forms_equal_the_loop_reference(dtype, tol):
    q, k, v = _qkv(dtype)
    ref = _reference(q.double(), k.double(), v.double(), causal=True).to(dtype)
    quad = la.linear_attention_quadratic(q, k, v, causal=True)
    rec, _ = la.linear_attention_recurrent(q, k, v)
    for out in [quad, rec] + [la.linear_attention_chunked(q, k, v, c) for c in (1, 2, 4, 9, 64)]:
        assert out.dtype == dtype and out.shape == (2, 2, 9, 3)
        torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-6)])
def test_noncausal_equals_the_loop_reference(dtype, tol):
    q, k, v = _qkv(dtype, t=5, tk=8)                       # Tq != Tk is fine without a mask
    ref = _reference(q.double(), k.double(), v.double(), causal=False).to(dtype)
    torch.testing.assert_close(la.linear_attention_noncausal(q, k, v), ref, rtol=tol, atol=tol)
    torch.testing.assert_close(la.linear_attention_quadratic(q, k, v, causal=False), ref, rtol=tol, atol=tol)


def test_recurrent_state_continues_and_is_fixed_size():
    q, k, v = _qkv(torch.float64, t=10)
    full, (S, z) = la.linear_attention_recurrent(q, k, v)
    first, state = la.linear_attention_recurrent(q[..., :6, :], k[..., :6, :], v[..., :6, :])
    second, state = la.linear_attention_recurrent(q[..., 6:, :], k[..., 6:, :], v[..., 6:, :], state)
    torch.testing.assert_close(torch.cat([first, second], -2), full, rtol=1e-12, atol=1e-12)
    assert S.shape == (2, 2, 4, 3) and z.shape == (2, 2, 4)                    # D x Dv, whatever T is
    fk = F.elu(k) + 1                                                           # S = sum_j phi(k_j) v_j^T
    torch.testing.assert_close(S, fk.transpose(-2, -1) @ v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state[1], fk.sum(-2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T,chunk", [(8, 4), (13, 5), (3, 64)])
def test_flop_formulas_equal_the_counted_matmuls(T, chunk):
    q, k, v = (x[:1, :1] for x in _qkv(torch.float32, t=T))
    counted = {}
    for name, fn in [("softmax", lambda: scaled_dot_product_attention(q, k, v)),
                     ("linear", lambda: la.linear_attention_noncausal(q, k, v)),
                     ("chunked", lambda: la.linear_attention_chunked(q, k, v, chunk))]:
        with FlopCounterMode(display=False) as fc:
            fn()
        counted[name] = fc.get_total_flops()
    assert counted == la.attention_flops(T, 4, 3, chunk)


def test_bad_input_raises():
    q, k, v = _qkv(torch.float32, t=4, tk=6)
    with pytest.raises(ValueError, match="Tq = Tk"):
        la.linear_attention_chunked(q, k, v)
    with pytest.raises(ValueError, match="chunk_size"):
        la.linear_attention_chunked(q, q, q, 0)
    with pytest.raises(ValueError, match=r"\(2, 2, 4, 4\)"):
        la.linear_attention_noncausal(q, k[..., :3], v)

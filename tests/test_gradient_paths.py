"""attnbook.gradient_paths against autograd's full Jacobian, a closed form, and hand-counted graphs."""

import pytest
import torch

from attnbook.attention import SelfAttention
from attnbook.gradient_paths import graph_depth, jacobian_norms
from attnbook.recurrent import GRUCell, Recurrent

F64 = torch.float64


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_jacobian_norms_equal_the_full_autograd_jacobian():
    torch.manual_seed(0)
    layer = Recurrent(GRUCell(3, 4)).double()
    x = randn(2, 5, 3, seed=1)
    norms = jacobian_norms(lambda z: layer(z)[0][:, -1], x)
    for b in range(2):
        jac = torch.autograd.functional.jacobian(lambda z: layer(z.unsqueeze(0))[0][0, -1], x[b])  # (4, 5, 3)
        torch.testing.assert_close(norms[b], jac.pow(2).sum(dim=(0, 2)).sqrt(), rtol=1e-12, atol=1e-14)


def test_linear_recurrence_matches_the_closed_form_matrix_power():
    # h_t = W h_{t-1} + U x_t  =>  dh_T/dx_t = W^(T-t) U
    w, u = 0.9 * torch.linalg.qr(randn(4, 4, seed=2))[0], randn(4, 3, seed=3)

    def run(x):
        h = torch.zeros(x.size(0), 4, dtype=F64)
        for t in range(x.size(1)):
            h = h @ w.T + x[:, t] @ u.T
        return h

    norms = jacobian_norms(run, randn(1, 6, 3, seed=4))[0]
    expected = torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, 5 - t) @ u) for t in range(6)])
    torch.testing.assert_close(norms, expected, rtol=1e-12, atol=1e-14)
    # W is 0.9 x orthogonal: every step back multiplies the norm by exactly 0.9
    torch.testing.assert_close(norms[:-1] / norms[1:], torch.full((5,), 0.9, dtype=F64))


def test_graph_depth_counts_the_longest_chain():
    x = torch.randn(3, requires_grad=True)
    assert graph_depth(x, x) == 0
    assert graph_depth(x * 2, x) == 1
    assert graph_depth(((x * 2).exp() + 1).sum(), x) == 4
    # two branches of lengths 1 and 3 joined by an add: 3 + 1
    assert graph_depth(x * 3 + x.exp().sin().cos(), x) == 4


def test_self_attention_depth_does_not_grow_with_length_but_a_recurrence_does():
    torch.manual_seed(0)
    sa, rnn = SelfAttention(8), Recurrent(GRUCell(8, 8))
    depths_sa, depths_rnn = [], []
    for t in (4, 16, 64):
        x = torch.randn(1, t, 8, requires_grad=True)
        depths_sa.append(graph_depth(sa(x)[0][:, -1], x))
        depths_rnn.append(graph_depth(rnn(x)[0][:, -1], x))
    assert len(set(depths_sa)) == 1
    # one GRU step adds the same number of operations: depth is affine in T
    assert (depths_rnn[1] - depths_rnn[0]) / 12 == (depths_rnn[2] - depths_rnn[1]) / 48 > 0


def test_bad_input_raises_value_error():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match="leaf tensor with requires_grad=True"):
        graph_depth(x * 2, x * 1)
    with pytest.raises(ValueError, match="does not depend on inp"):
        graph_depth(torch.randn(2, requires_grad=True) * 2, x)
    with pytest.raises(ValueError, match="no autograd graph"):
        graph_depth(torch.randn(2), x)
    with pytest.raises(ValueError, match=r"shape \(B, T, D\), got \(2, 3\)"):
        jacobian_norms(lambda z: z, torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"fn must map \(B, T, D\) to \(B, H\); on \(1, T, D\) it gave \(1, 4, 3\)"):
        jacobian_norms(lambda z: z, torch.randn(2, 4, 3))

"""Muon: the Newton–Schulz iteration against its closed form on the singular values, one optimiser step
against torch.optim.Muon, and the split of a model's parameters between Muon and AdamW."""

from __future__ import annotations

import pytest
import torch

import attnbook
from attnbook.muon import NS_COEFFICIENTS, Muon, muon_param_groups, newton_schulz


def _closed_form(g: torch.Tensor, steps: int) -> torch.Tensor:
    """NS acts on each singular value alone: s <- a s + b s^3 + c s^5, from s / ||g||_F. -> U diag(s) V^T."""
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    a, b, c = NS_COEFFICIENTS
    s = s / torch.linalg.matrix_norm(g)
    for _ in range(steps):
        s = a * s + b * s ** 3 + c * s ** 5
    return u @ torch.diag(s) @ vh


@pytest.mark.parametrize("shape", [(6, 10), (10, 6), (8, 8)])
@pytest.mark.parametrize("steps", [1, 5])
def test_newton_schulz_is_the_polynomial_on_the_singular_values(shape, steps):
    g = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(sum(shape) + steps))
    torch.testing.assert_close(newton_schulz(g, steps), _closed_form(g, steps), rtol=1e-10, atol=1e-12)


def test_five_steps_bring_singular_values_spread_over_two_decades_into_0_6_to_1_3():
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(64, 64, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(192, 64, generator=gen, dtype=torch.float64))
    g = u @ torch.diag(torch.logspace(-2, 0, 64, dtype=torch.float64)) @ v.T      # (64, 192), condition 100
    o = newton_schulz(g)
    s = torch.linalg.svdvals(o)
    assert s.min() > 0.6 and s.max() < 1.3                     # near 1, not exactly: the speed-tuned polynomial
    torch.testing.assert_close(u.T @ o @ v, torch.diag(torch.diagonal(u.T @ o @ v)), rtol=0, atol=1e-10)  # same U, V


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon needs torch >= 2.9")
@pytest.mark.parametrize("nesterov", [True, False])
def test_steps_match_torch_muon_with_adamw_matched_learning_rate(nesterov):
    torch.manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(48, 16))
    theirs = torch.nn.Parameter(ours.detach().clone())
    a = Muon([ours], lr=0.02, momentum=0.9, nesterov=nesterov, weight_decay=0.1)
    b = torch.optim.Muon([theirs], lr=0.02, momentum=0.9, nesterov=nesterov, weight_decay=0.1,
                         adjust_lr_fn="match_rms_adamw")
    start = ours.detach().clone()
    for _ in range(4):
        grad = torch.randn(48, 16)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        a.step()
        b.step()
    moved = float((theirs.detach() - start).abs().max())
    # torch runs the iteration in bfloat16 (8 bits of mantissa): agreement to ~1 % of the distance moved
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=0.02 * moved)
    assert moved > 0.04                                            # four steps of 0.02 * 0.2 * sqrt(48) each


def test_the_decoder_only_model_splits_into_hidden_matrices_and_the_rest():
    model = attnbook.DecoderOnlyLM(50, 16, 4, 2, 32, output_bias=True)
    hidden, rest = muon_param_groups(model)
    assert len({id(p) for p in hidden + rest}) == len(hidden) + len(rest) == len(list(model.parameters()))
    assert all(p.dim() == 2 for p in hidden) and all(p is not model.embed.weight for p in hidden)
    assert any(p is model.embed.weight for p in rest) and all(p.dim() == 1 or p is model.embed.weight for p in rest)
    assert len(hidden) == sum(1 for n, p in model.named_parameters() if p.dim() == 2 and n.startswith("layers."))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"2-D weight matrices only, got a parameter of shape \(5,\)"):
        Muon([torch.nn.Parameter(torch.zeros(5))])
    with pytest.raises(ValueError, match=r"lr must be a finite number >= 0, got -0.1"):
        Muon([torch.nn.Parameter(torch.zeros(2, 2))], lr=-0.1)
    with pytest.raises(ValueError, match=r"momentum must be < 1, got 1.0"):
        Muon([torch.nn.Parameter(torch.zeros(2, 2))], momentum=1.0)
    with pytest.raises(ValueError, match=r"ns_steps must be a positive integer, got 2.5"):
        Muon([torch.nn.Parameter(torch.zeros(2, 2))], ns_steps=2.5)     # at construction, not at the first step
    with pytest.raises(ValueError, match=r"2-D floating-point matrix, got torch.int64 \(2, 2\)"):
        newton_schulz(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"2-D floating-point matrix, got torch.float32 \(2, 2, 2\)"):
        newton_schulz(torch.zeros(2, 2, 2))
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        newton_schulz(torch.ones(2, 2), 0)
    assert torch.equal(newton_schulz(torch.zeros(3, 2)), torch.zeros(3, 2))   # a zero gradient: no NaN

"""Training utilities vs torch: label smoothing vs F.cross_entropy(label_smoothing=...), clipping vs
clip_grad_norm_, the schedules vs their formulas, teacher forcing vs a position-by-position loss."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook import (Transformer, clip_grad_norm, fit, label_smoothed_cross_entropy, noam_lr,
                      teacher_forcing_loss, warmup_linear_decay_lr)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [None, 0])
def test_label_smoothing_equals_torch(eps, reduction, ignore):
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(20, 7, generator=g, dtype=torch.float64)).requires_grad_()
    target = torch.randint(0, 7, (20,), generator=g)
    target[:4] = 0                                           # some rows to ignore
    ours = label_smoothed_cross_entropy(logits, target, eps, ignore_index=ignore, reduction=reduction)
    ref = F.cross_entropy(logits, target, label_smoothing=eps, reduction=reduction,
                          ignore_index=-100 if ignore is None else ignore)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    g1, = torch.autograd.grad(ours.sum(), logits)
    g2, = torch.autograd.grad(ref.sum(), logits)
    torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-12)


def test_label_smoothing_closed_form_minimum():
    """The loss is smallest when p = q, where it equals the entropy of q."""
    v, eps = 5, 0.2
    q = torch.full((v,), eps / v, dtype=torch.float64)
    q[2] += 1 - eps
    loss = label_smoothed_cross_entropy(q.log()[None], torch.tensor([2]), eps)
    torch.testing.assert_close(loss, -(q * q.log()).sum())


def test_label_smoothing_bad_input():
    with pytest.raises(ValueError, match=r"logits \(3,\) and target \(3,\)"):
        label_smoothed_cross_entropy(torch.randn(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="smoothing must be a number in \\[0, 1\\], got 1.5"):
        label_smoothed_cross_entropy(torch.randn(3, 4), torch.zeros(3, dtype=torch.long), 1.5)
    with pytest.raises(ValueError, match="reduction"):
        label_smoothed_cross_entropy(torch.randn(3, 4), torch.zeros(3, dtype=torch.long), reduction="avg")


def test_noam_schedule_values():
    d, w = 512, 4000
    assert noam_lr(1, d, w) == pytest.approx(d ** -0.5 * w ** -1.5)
    assert noam_lr(w, d, w) == pytest.approx((d * w) ** -0.5)             # the peak
    assert noam_lr(4 * w, d, w) == pytest.approx(0.5 * (d * w) ** -0.5)   # ~ step^-0.5 afterwards
    lrs = [noam_lr(s, d, w) for s in range(1, 3 * w)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == w
    assert noam_lr(100, d, w, factor=2.0) == pytest.approx(2 * 100 * d ** -0.5 * w ** -1.5)
    with pytest.raises(ValueError, match="step >= 1"):
        noam_lr(0, d, w)


def test_warmup_linear_decay_values():
    peak, w, total = 1e-3, 100, 1000
    assert warmup_linear_decay_lr(0, peak, w, total) == 0.0
    assert warmup_linear_decay_lr(50, peak, w, total) == pytest.approx(5e-4)
    assert warmup_linear_decay_lr(100, peak, w, total) == pytest.approx(peak)
    assert warmup_linear_decay_lr(550, peak, w, total) == pytest.approx(5e-4)
    assert warmup_linear_decay_lr(1000, peak, w, total, final=1e-5) == pytest.approx(1e-5)
    assert warmup_linear_decay_lr(2000, peak, w, total, final=1e-5) == pytest.approx(1e-5)
    with pytest.raises(ValueError, match="warmup < total"):
        warmup_linear_decay_lr(1, peak, 1000, 1000)


def _grads(seed, scale):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    (scale * net(torch.randn(11, 5, dtype=torch.float64)).pow(2).sum()).backward()
    return net


@pytest.mark.parametrize("scale, max_norm", [(100.0, 1.0), (1e-3, 1.0), (10.0, 0.5)])
def test_clipping_equals_torch_and_bounds_the_norm(scale, max_norm):
    ours, theirs = _grads(0, scale), _grads(0, scale)
    before = [p.grad.clone() for p in ours.parameters()]
    n1 = clip_grad_norm(ours.parameters(), max_norm)
    n2 = nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
    torch.testing.assert_close(n1, n2)
    for a, b, g in zip(ours.parameters(), theirs.parameters(), before):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(a.grad / a.grad.norm(), g / g.norm())   # direction kept
    after = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in ours.parameters()))
    assert after <= max_norm * (1 + 1e-9)
    if float(n1) <= max_norm:                                              # small gradients untouched
        assert all(torch.equal(p.grad, g) for p, g in zip(ours.parameters(), before))
    with pytest.raises(ValueError, match="max_norm must be a number > 0"):
        clip_grad_norm(ours.parameters(), 0)


def test_teacher_forcing_loss_equals_a_position_by_position_loss():
    torch.manual_seed(1)
    model = Transformer(9, 8, 16, 2, 1, 32).double().eval()
    src = torch.randint(1, 9, (3, 5))
    tgt = torch.tensor([[1, 4, 5, 6, 2, 0], [1, 7, 2, 0, 0, 0], [1, 3, 3, 3, 3, 2]])   # <bos> ... <eos> <pad>
    loss = teacher_forcing_loss(model, src, tgt, smoothing=0.1, pad_id=0)
    terms = []
    for t in range(tgt.size(1) - 1):                 # predict tgt[:, t + 1] from tgt[:, :t + 1], one by one
        logits = model(src, tgt[:, :t + 1])[:, -1]
        terms.append(F.cross_entropy(logits, tgt[:, t + 1], label_smoothing=0.1, ignore_index=0, reduction="sum"))
    torch.testing.assert_close(loss, sum(terms) / (tgt[:, 1:] != 0).sum(), rtol=1e-10, atol=1e-12)


def test_fit_follows_the_schedule_and_prints_to_stdout(capsys):
    torch.manual_seed(2)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    sched = lambda s: warmup_linear_decay_lr(s, 0.1, 10, 200)    # noqa: E731
    hist = fit(model, lambda step: (x, y), lambda m, a, b: F.mse_loss(m(a).squeeze(-1), b), opt, 200,
               lr_schedule=sched, max_grad_norm=5.0, log_every=50)
    assert hist["lr"] == [sched(s) for s in range(1, 201)]
    assert hist["loss"][-1] < 1e-3 * hist["loss"][0]
    out = capsys.readouterr()
    assert out.err == "" and out.out.count(" 步  损失 ") == 4 and "第 200/200 步" in out.out
    assert not model.training
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        fit(model, lambda s: (x, y), lambda m, a, b: m(a).sum(), opt, 0)


def test_fit_steps_every_optimizer_with_each_groups_lr_scale():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    reference = copy.deepcopy(model)
    x, y = torch.randn(16, 3), torch.randn(16)
    loss_fn = lambda m, a, b: F.mse_loss(m(a).squeeze(-1), b)   # noqa: E731
    first = torch.optim.SGD([dict(params=model[0].parameters(), lr_scale=3.0)], lr=0.0)
    second = torch.optim.SGD(model[1].parameters(), lr=0.0)
    hist = fit(model, lambda s: (x, y), loss_fn, [first, second], 5, lr_schedule=lambda s: 0.01 * s)
    assert hist["lr"] == [0.01 * s * 3.0 for s in range(1, 6)]                # the first group: scaled
    for s in range(1, 6):                                          # the same by hand: plain SGD, two rates
        reference.zero_grad()
        loss_fn(reference, x, y).backward()
        with torch.no_grad():
            for layer, scale in ((reference[0], 3.0), (reference[1], 1.0)):
                for p in layer.parameters():
                    p -= 0.01 * s * scale * p.grad
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    for bad in ([], [first, "adam"]):
        with pytest.raises(ValueError, match="optimizer must be a torch optimizer or a non-empty list"):
            fit(model, lambda s: (x, y), loss_fn, bad, 1)

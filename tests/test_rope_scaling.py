"""RoPE scaling: frequencies and attention factors equal transformers.modeling_rope_utils; rotation equals apply_rotary.

Breaks seen to fail: linear_scaling multiplying by the factor instead of dividing; dynamic NTK exponent
dim/(dim-2) replaced by 1; YaRN ramp reversed (ramp <-> 1 - ramp); YaRN without ``truncate``'s floor/ceil;
YaRN attention factor with mscale_all_dim ignored; apply_rotary_frequencies without the attention factor;
score_vs_distance without the factor 2; scaled_frequencies dispatching "linear" to dynamic NTK;
the paper's dynamic NTK rule using s T / L (4 tests fail); the paper's YaRN ramp reversed (5 fail);
keep_first_scaling dividing w_0 too (1 fails).
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import apply_rotary
from attnbook import rope_scaling as rs

tr_rope = pytest.importorskip("transformers.modeling_rope_utils")
from transformers import LlamaConfig  # noqa: E402


def _config(head_dim, base, max_pos, **rope):
    return LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                       max_position_embeddings=max_pos, rope_parameters={"rope_theta": base, **rope})


def _close(ours, theirs):
    # transformers works in float32; ours is float64
    torch.testing.assert_close(ours, theirs.to(torch.float64), rtol=2e-6, atol=0)


@pytest.mark.parametrize("dim,base,factor", [(8, 10000.0, 2.0), (16, 500000.0, 8.0), (64, 10000.0, 4.0)])
def test_linear_equals_transformers(dim, base, factor):
    ref, af = tr_rope._compute_linear_scaling_rope_parameters(
        _config(dim, base, 2048, rope_type="linear", factor=factor))
    ours, our_af = rs.linear_scaling(dim, base, factor)
    _close(ours, ref)
    assert our_af == af == 1.0


@pytest.mark.parametrize("dim,base,factor,max_pos,seq_len", [
    (8, 10000.0, 2.0, 1024, 3000), (16, 10000.0, 4.0, 512, 512), (64, 500000.0, 8.0, 2048, 20000),
    (32, 10000.0, 2.0, 1024, 100)])
def test_dynamic_ntk_equals_transformers(dim, base, factor, max_pos, seq_len):
    ref, af = tr_rope._compute_dynamic_ntk_parameters(
        _config(dim, base, max_pos, rope_type="dynamic", factor=factor), seq_len=seq_len)
    ours, our_af = rs.dynamic_ntk_scaling(dim, base, factor, max_pos, seq_len)
    _close(ours, ref)
    assert our_af == af == 1.0
    if seq_len <= max_pos:                       # inside the training length nothing changes
        torch.testing.assert_close(ours, rs.rope_frequencies(dim, base), rtol=1e-12, atol=0)
    else:                                        # lowest frequency divided by s T / L - (s - 1)
        ratio = rs.rope_frequencies(dim, base)[-1] / ours[-1]
        assert math.isclose(float(ratio), factor * seq_len / max_pos - (factor - 1), rel_tol=1e-10)


YARN = [
    dict(dim=8, base=10000.0, factor=4.0, orig=1024),
    dict(dim=64, base=10000.0, factor=16.0, orig=4096, beta_fast=32.0, beta_slow=1.0),
    dict(dim=64, base=10000.0, factor=40.0, orig=4096, mscale=1.0, mscale_all_dim=1.0),   # DeepSeek-V3
    dict(dim=32, base=500000.0, factor=8.0, orig=2048, mscale=1.0, mscale_all_dim=0.707, truncate=False),
    dict(dim=16, base=10000.0, factor=2.0, orig=512, beta_fast=16.0, beta_slow=2.0, attention_factor=1.3),
]


@pytest.mark.parametrize("p", YARN)
def test_yarn_equals_transformers(p):
    p = dict(p)
    dim, base, factor, orig = p.pop("dim"), p.pop("base"), p.pop("factor"), p.pop("orig")
    ref, af = tr_rope._compute_yarn_parameters(_config(
        dim, base, orig * 4, rope_type="yarn", factor=factor, original_max_position_embeddings=orig, **p))
    ours, our_af = rs.yarn_scaling(dim, base, factor, orig, **p)
    _close(ours, ref)
    assert math.isclose(our_af, af, rel_tol=1e-12)
    w = rs.rope_frequencies(dim, base)           # every frequency lies between w / s and w
    assert torch.all(ours <= w * (1 + 1e-12)) and torch.all(ours >= w / factor * (1 - 1e-12))


def test_yarn_temperature_closed_form():
    assert rs.yarn_scaling(8, 10000.0, 4.0, 1024)[1] == pytest.approx(0.1 * math.log(4.0) + 1)
    assert rs.yarn_scaling(8, 10000.0, 1.0, 1024)[1] == 1.0
    # DeepSeek-V3 sets mscale = mscale_all_dim: factor 1 in cos/sin, the temperature goes into the scale
    assert rs.yarn_scaling(8, 10000.0, 40.0, 4096, mscale=1.0, mscale_all_dim=1.0)[1] == 1.0


def test_apply_rotary_frequencies_matches_package_rope_and_interpolation():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64)
    w = rs.rope_frequencies(8)
    torch.testing.assert_close(rs.apply_rotary_frequencies(x, w), apply_rotary(x), rtol=1e-14, atol=1e-14)
    # position interpolation = the package's RoPE at positions pos / s
    inv, _ = rs.linear_scaling(8, 10000.0, 4.0)
    pos = torch.arange(7, dtype=torch.float64)
    torch.testing.assert_close(rs.apply_rotary_frequencies(x, inv), apply_rotary(x, pos / 4),
                               rtol=1e-12, atol=1e-12)
    # the attention factor a multiplies every score q.k by a^2
    q, k = x[..., :1, :], x[..., 1:, :]
    s1 = rs.apply_rotary_frequencies(q, w) @ rs.apply_rotary_frequencies(k, w).transpose(-2, -1)
    s2 = (rs.apply_rotary_frequencies(q, w, attention_factor=1.5)
          @ rs.apply_rotary_frequencies(k, w, attention_factor=1.5).transpose(-2, -1))
    torch.testing.assert_close(s2, 2.25 * s1, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["none", "linear", "yarn"])
def test_score_vs_distance_equals_rotated_dot_products(method):
    inv, af = {"none": (rs.rope_frequencies(16), 1.0), "linear": rs.linear_scaling(16, 10000.0, 4.0),
               "yarn": rs.yarn_scaling(16, 10000.0, 8.0, 64)}[method]
    ones = torch.ones(1, 16, dtype=torch.float64)
    q = rs.apply_rotary_frequencies(ones.expand(40, 16), inv, torch.full((40,), 50), af)      # query at 50
    k = rs.apply_rotary_frequencies(ones.expand(40, 16), inv, 50 - torch.arange(40), af)      # keys at 50 - d
    d = torch.arange(40)
    torch.testing.assert_close(rs.score_vs_distance(inv, d, af), (q * k).sum(-1), rtol=1e-12, atol=1e-12)
    assert rs.score_vs_distance(inv, torch.tensor(0), af) == pytest.approx(16 * af ** 2)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="even"):
        rs.linear_scaling(7, 10000.0, 2.0)
    with pytest.raises(ValueError, match="factor"):
        rs.yarn_scaling(8, 10000.0, 0.5, 1024)
    with pytest.raises(ValueError, match=r"\(4,\)"):
        rs.apply_rotary_frequencies(torch.randn(3, 8), torch.ones(3))
    with pytest.raises(ValueError, match="dim >= 4"):          # not ZeroDivisionError from dim / (dim - 2)
        rs.dynamic_ntk_scaling(2, 10000.0, 2.0, 16, seq_len=32)


@pytest.mark.parametrize("method,rope", [("linear", dict(rope_type="linear", factor=4.0)),
                                         ("dynamic_ntk", dict(rope_type="dynamic", factor=4.0)),
                                         ("yarn", dict(rope_type="yarn", factor=4.0,
                                                       original_max_position_embeddings=16))])
def test_scaled_frequencies_by_name_equal_transformers(method, rope):
    compute = {"linear": tr_rope._compute_linear_scaling_rope_parameters,
               "dynamic_ntk": tr_rope._compute_dynamic_ntk_parameters,
               "yarn": tr_rope._compute_yarn_parameters}[method]
    config = _config(8, 10000.0, 16 if method != "yarn" else 64, **rope)
    ref, af = compute(config, None, 64) if method == "dynamic_ntk" else compute(config)
    ours, our_af = rs.scaled_frequencies(method, 8, 10000.0, 4.0, 16, seq_len=64)
    _close(ours, ref)
    assert our_af == pytest.approx(af, rel=1e-12)


def test_scaled_frequencies_none_is_plain_rope_and_bad_names_raise():
    w, af = rs.scaled_frequencies("none", 8, 10000.0, 4.0, 16)
    torch.testing.assert_close(w, 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    assert af == 1.0
    with pytest.raises(ValueError, match="method must be one of"):
        rs.scaled_frequencies("ntk", 8, 10000.0, 4.0, 16)


# --- the controls (issue 38): the paper's dynamic NTK rule, the paper's YaRN ramp, keep-first ---------------

@pytest.mark.parametrize("dim,base,factor,max_pos,seq_len", [
    (8, 10000.0, 4.0, 16, 64), (16, 10000.0, 2.0, 512, 1500), (64, 500000.0, 8.0, 2048, 2048)])
def test_dynamic_ntk_paper_rule_equals_transformers_with_factor_one(dim, base, factor, max_pos, seq_len):
    # the paper (Peng et al. 2023, sec. 3.3) takes s = max(1, T / L); transformers' formula s T / L - (s - 1)
    # is exactly that at s = 1, so transformers with factor 1 is an independent reference
    ref, _ = tr_rope._compute_dynamic_ntk_parameters(
        _config(dim, base, max_pos, rope_type="dynamic", factor=1.0), seq_len=seq_len)
    ours, af = rs.dynamic_ntk_scaling(dim, base, factor, max_pos, seq_len, rule="paper")
    _close(ours, ref)
    assert af == 1.0
    ratio = float(rs.rope_frequencies(dim, base)[-1] / ours[-1])        # slowest pair divided by T / L
    assert math.isclose(ratio, max(1.0, seq_len / max_pos), rel_tol=1e-10)
    assert rs.scaled_frequencies("dynamic_ntk_paper", dim, base, factor, max_pos, seq_len)[0].equal(ours)


def test_dynamic_ntk_rules_at_four_times_the_length():
    # at T = 4L with s = 4: transformers divides the slowest frequency by 13, the paper by 4
    w = rs.rope_frequencies(8)
    hf, _ = rs.dynamic_ntk_scaling(8, 10000.0, 4.0, 16, 64)
    paper, _ = rs.dynamic_ntk_scaling(8, 10000.0, 4.0, 16, 64, rule="paper")
    assert float(w[-1] / hf[-1]) == pytest.approx(13.0, rel=1e-12)
    assert float(w[-1] / paper[-1]) == pytest.approx(4.0, rel=1e-12)


def _yarn_paper_reference(dim, base, factor, L, alpha=1.0, beta=32.0):
    # transcription of the paper's NTK-by-parts (Peng et al. 2023, sec. 3.2), one pair at a time in Python floats:
    # r = L / lambda_d (turns), gamma(r) = 0 below alpha, 1 above beta, linear between;
    # h(theta) = (1 - gamma) theta / s + gamma theta
    out = []
    for d in range(dim // 2):
        theta = base ** (-2 * d / dim)
        r = L / (2 * math.pi / theta)
        gamma = 0.0 if r < alpha else 1.0 if r > beta else (r - alpha) / (beta - alpha)
        out.append((1 - gamma) * theta / factor + gamma * theta)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("dim,base,factor,L", [(8, 10000.0, 4.0, 16), (64, 10000.0, 4.0, 2048),
                                               (32, 500000.0, 8.0, 4096), (64, 10000.0, 4.0, 16)])
def test_yarn_paper_ramp_equals_the_papers_formula(dim, base, factor, L):
    ours, af = rs.yarn_scaling(dim, base, factor, L, ramp="turns")
    torch.testing.assert_close(ours, _yarn_paper_reference(dim, base, factor, L), rtol=1e-12, atol=0)
    assert af == pytest.approx(0.1 * math.log(factor) + 1)
    assert rs.scaled_frequencies("yarn_paper", dim, base, factor, L)[0].equal(ours)


def test_yarn_ramps_differ_and_keep_first_is_yarn_on_the_small_head():
    # d_k = 8, L = 16: transformers' YaRN keeps theta_1 and divides the rest by s -- keep-first, plus the temperature
    ref, af = tr_rope._compute_yarn_parameters(_config(
        8, 10000.0, 64, rope_type="yarn", factor=4.0, original_max_position_embeddings=16))
    keep, keep_af = rs.keep_first_scaling(8, 10000.0, 4.0)
    _close(keep, ref)
    assert keep_af == 1.0 and af > 1.0
    assert rs.scaled_frequencies("keep_first", 8, 10000.0, 4.0, 16)[0].equal(keep)
    # the paper's ramp multiplies theta_1 by 0.287 there (1.55 / 31 kept), close to PI's 1/4
    paper, _ = rs.yarn_scaling(8, 10000.0, 4.0, 16, ramp="turns")
    assert float(paper[0]) == pytest.approx(0.287, abs=5e-4)


def test_control_bad_input_raises():
    with pytest.raises(ValueError, match="rule"):
        rs.dynamic_ntk_scaling(8, 10000.0, 4.0, 16, 64, rule="hf")
    with pytest.raises(ValueError, match="ramp"):
        rs.yarn_scaling(8, 10000.0, 4.0, 16, ramp="turn")
    with pytest.raises(ValueError, match="factor"):
        rs.keep_first_scaling(8, 10000.0, 0.5)

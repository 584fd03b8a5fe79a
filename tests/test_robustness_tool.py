"""make robustness's variants: parsing, and the CPU kernel paths this machine can run (a path above the CPU's
best stops torch 2.13 on an illegal instruction, so it is skipped and named rather than failed)."""

from __future__ import annotations

import random
import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import robustness  # noqa: E402


def test_variants_compose_and_bad_parts_are_named():
    name, env, busy = robustness.variant_env("busy/cpu=default/seed+2", random.Random(0))
    assert (name, busy) == ("busy/cpu=default/seed+2", True)
    assert env == {"ATEN_CPU_CAPABILITY": "default", "ATTNBOOK_SEED_SHIFT": "2", "ATTNBOOK_STRICT_TIMING": "1"}
    name, env, _ = robustness.variant_env("seed+random", random.Random(0))
    assert 4 <= int(env["ATTNBOOK_SEED_SHIFT"]) <= 99 and name == f"seed+{env['ATTNBOOK_SEED_SHIFT']}"
    with pytest.raises(ValueError, match="cpu=sse"):
        robustness.variant_env("cpu=sse", random.Random(0))


def test_best_capability_is_what_torch_reports_without_the_override(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")     # the probe must not inherit it
    best = robustness.best_capability()
    assert best in robustness.CAPABILITIES
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    reported = torch.backends.cpu.get_cpu_capability().lower()
    assert best == (reported if reported in robustness.CAPABILITIES else "default")


@pytest.mark.parametrize("best, skipped", [("avx512", []), ("avx2", ["cpu=avx512"]),
                                           ("default", ["cpu=avx2", "cpu=avx512"])])
def test_paths_above_the_cpus_best_are_skipped(best, skipped):
    rng = random.Random(0)
    parsed = [robustness.variant_env(v, rng) for v in robustness.VARIANTS]
    kept, beyond = robustness.split_runnable(parsed, best)
    assert beyond == skipped
    assert [p[0] for p in kept] == [v for v in robustness.VARIANTS if v not in skipped]

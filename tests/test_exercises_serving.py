"""The serving chapter's coding exercises: the reference passes, the typical wrong versions fail and are named."""

from __future__ import annotations

import pytest
import torch

from attnbook import exercises
from attnbook.exercises import _watch, serving
from attnbook.paged_cache import gather_blocks
from attnbook.speculative import residual_distribution


def test_the_books_own_functions_pass(monkeypatch):
    monkeypatch.setattr(_watch, "ENABLED", False)     # the exercises forbid calling these very functions
    assert exercises.check("paged_gather", gather_blocks).passed
    assert exercises.check("speculative_residual", residual_distribution).passed
    assert exercises.info("paged_gather").chapter == "serving"
    assert {"paged_gather", "speculative_residual"} <= set(exercises.names())


@pytest.mark.parametrize("wrong, key", [(serving._no_transpose, "no_transpose"), (serving._no_truncate, "no_truncate"),
                                        (serving._ignore_table, "ignore_table")])
def test_wrong_gathers_fail_and_are_recognised(wrong, key):
    result = exercises.check("paged_gather", wrong)
    assert not result.passed and result.mistake == key, result.message
    assert "分页 KV 缓存" in result.message


@pytest.mark.parametrize("wrong, key", [(serving._from_target, "from_target"), (serving._not_normalised, "not_normalised"),
                                        (serving._absolute, "absolute"), (serving._reversed, "reversed"),
                                        (serving._no_empty_case, "no_empty_case")])
def test_wrong_residuals_fail_and_are_recognised(wrong, key):
    result = exercises.check("speculative_residual", wrong)
    assert not result.passed and result.mistake == key, result.message


def test_a_stub_and_a_crash_are_reported_not_raised():
    def stub(pool, block_table, length):
        raise NotImplementedError

    assert exercises.check("paged_gather", stub).message.startswith("还没有实现")
    crash = exercises.check("speculative_residual", lambda p, q: p[10_000])
    assert not crash.passed and "IndexError" in crash.message
    nan_on_equal = exercises.check("speculative_residual", lambda p, q: (p - q).clamp(min=0) / (p - q).clamp(min=0).sum())
    assert not nan_on_equal.passed and "p 与 q 相同" in nan_on_equal.message


def test_the_pass_message_lists_exactly_the_covered_cases(monkeypatch):
    monkeypatch.setattr(_watch, "ENABLED", False)
    # the appendix's table shows `covers`; the pass message names the cases run (cold read, 2026-11-28)
    for name, fn in (("paged_gather", gather_blocks), ("speculative_residual", residual_distribution)):
        message = exercises.check(name, fn).message
        assert message == (f"通过：{len(exercises.info(name).covers)} 个情形都与本书的实现一致"
                           f"（{'；'.join(exercises.info(name).covers)}）。"), message

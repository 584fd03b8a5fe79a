"""Chapter checks that tell a reader, in Chinese, which claim failed, what was expected and what was measured.

A chapter's claims must hold on any seed and CPU/GPU kernel (see ``make robustness``); where one does not,
the reader sees the claim, the expected range and the measured value instead of a bare ``AssertionError``.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings

from .book import GLUE_VARIABLE, pick_device, seed_shift

STRICT_TIMING_VARIABLE = "ATTNBOOK_STRICT_TIMING"  # set by make robustness and the tests; the build sets ATTNBOOK_GLUE


class ClaimError(AssertionError):
    """A chapter's claim did not hold on this run; the build fails on it like on any assert."""


class TimingWarning(UserWarning):
    """A wall-clock claim did not hold on a reader's machine (outside the build): a note, not a stop."""


def timing_is_strict() -> bool:
    """Timing claims fail in the book build, in ``make robustness`` and in the tests; elsewhere they warn."""
    return bool(os.environ.get(GLUE_VARIABLE) or os.environ.get(STRICT_TIMING_VARIABLE))


def _as_number(value):
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:  # a one-element tensor or array
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"check needs a real number (or bool with expect=...), got {type(value).__name__}")
    return float(value)


def _fail(claim: str, expected: str, measured: str, timing: bool = False) -> None:
    if timing and not timing_is_strict():
        warnings.warn(
            f"计时的论断在这台机器上没有成立：{claim}\n"
            f"  期望：{expected}\n"
            f"  本次测得：{measured}\n"
            f"  （墙钟时间取决于 CPU、同时运行的其他程序和计算路径；在繁忙或共享的机器上（例如 Colab）比例会变。"
            f"书中的结论以构建时在安静机器上测得的数字和计数为准；这里只是提醒，笔记本继续运行。）",
            TimingWarning, stacklevel=3)
        return
    raise ClaimError(
        f"本章的论断没有成立：{claim}\n"
        f"  期望：{expected}\n"
        f"  本次测得：{measured}\n"
        f"  （随机种子偏移 {seed_shift()}，设备 {pick_device()}。书中的结论应当对任何种子和硬件都成立；"
        f"请把这条信息连同你的环境报告给本书的维护者。）")


def check(claim: str, value, low=None, high=None, *, expect=None, timing: bool = False):
    """Assert that ``low < value < high`` (either bound may be omitted), or ``value == expect``; return ``value``.

    ``claim`` says in words what the chapter claims (e.g. "注意力模型在训练长度上的准确率高于 95%").
    Bounds are strict; NaN never passes. ``timing=True`` marks a wall-clock claim: it fails in the build, the
    tests and ``make robustness`` (:func:`timing_is_strict`), and elsewhere (Colab, Binder, a reader's Jupyter)
    only warns with the measured numbers, since a busy machine can change a ratio of timings.
    """
    if expect is not None:
        if low is not None or high is not None:
            raise ValueError("check takes either bounds (low/high) or expect=..., not both")
        if value != expect:
            _fail(claim, f"等于 {expect!r}", repr(value), timing)
        return value
    if low is None and high is None:
        raise ValueError("check needs low, high or expect")
    x = _as_number(value)
    lo = -math.inf if low is None else _as_number(low)
    hi = math.inf if high is None else _as_number(high)
    if not lo < x < hi:  # False for NaN
        expected = " 且 ".join(s for s in ((f"> {lo:.6g}" if low is not None else ""),
                                           (f"< {hi:.6g}" if high is not None else "")) if s)
        _fail(claim, expected, f"{x:.6g}", timing)
    return value

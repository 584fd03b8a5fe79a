"""Coding exercises with automatic checks: ``exercises.check("masked_softmax", my_fn)``.

Each exercise has a name, a signature, the chapter that teaches it, and a checker that compares the reader's
function with the book's own implementation on random inputs and on the edge cases that matter (an empty
row, ties, large logits, T = 1, odd sizes, float16), and recognises the common wrong versions; it also fails a
function that changes its inputs or calls what the exercise forbids. A wrong, crashing or slow function is
reported in Chinese, never raised.

    from attnbook import exercises
    exercises.names()                         # every exercise, in book order
    exercises.info("masked_softmax")          # .signature, .chapter, .covers
    exercises.check("masked_softmax", fn)     # Result: .passed, .message (shown in a notebook)

Teachers: ``python -m attnbook.exercises student.py …`` checks every exercise function in the files, each file in
its own interpreter that only computes (see ``__main__``).
Tensors are torch tensors, vectors are rows (y = x @ W), masks are boolean with True = may attend.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Callable

from ._cases import Case, Mistake, compare, run_cases, show
from ._runner import run_with_timeout

__all__ = ["Exercise", "Result", "Case", "Mistake", "names", "info", "check", "register", "run_cases",
           "compare", "show", "CHAPTERS"]

# Chapter file stems in book order, with the chapter titles the messages cite.
CHAPTERS = {
    "sequence_models": "序列模型的挑战",
    "attention_basics": "注意力机制基础",
    "softmax": "Softmax 函数详解",
    "scaled_attention": "缩放点积注意力与自注意力",
    "positional_encoding": "位置编码",
    "word_vectors": "词向量",
    "multihead": "多头注意力",
    "text_classification": "案例：用自注意力做中文文本分类",
    "transformer": "Transformer：编码器与解码器",
    "gpt": "从 Transformer 到 GPT：仅解码器的语言模型",
    "efficient_attention": "高效注意力",
    "recent_attention": "注意力的新形态",
    "serving": "推理时的注意力",
}


@dataclass(frozen=True)
class Exercise:
    """An exercise: ``signature`` as the reader writes it, ``chapter`` a file stem, ``covers`` in Chinese.

    ``section`` is the title of the section that teaches it; messages say "见《chapter title》§section".
    """

    name: str
    signature: str
    chapter: str
    covers: tuple = ()
    section: str = ""
    summary: str = ""

    @property
    def where(self) -> str:
        title = CHAPTERS.get(self.chapter, self.chapter)
        return f"《{title}》§{self.section}" if self.section else f"《{title}》"


@dataclass
class Result:
    """What :func:`check` returns; in a notebook it shows as ✓/✗ and the message."""

    name: str
    passed: bool
    message: str
    mistake: str | None = None     # key of the recognised typical mistake, if any

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"{'✓' if self.passed else '✗'} {self.name}：{self.message}"

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.passed else "#cf222e"
        mark = "✓" if self.passed else "✗"
        return (f'<div class="attnbook-exercise-result" style="border-left:4px solid {color};padding:2px 8px">'
                f'<span style="color:{color};font-weight:bold">{mark} {html.escape(self.name)}</span>'
                f'<pre style="white-space:pre-wrap;margin:4px 0">{html.escape(self.message)}</pre></div>')


_REGISTRY: dict[str, tuple[Exercise, Callable]] = {}


def register(exercise: Exercise, checker: Callable) -> None:
    """Add an exercise. ``checker(fn)`` returns (passed, message) or (passed, message, mistake_key).

    Most checkers build cases and mistakes and return :func:`run_cases`'s answer; they need not catch the
    reader's errors (run_cases does) nor time anything (check does).
    """
    if not isinstance(exercise, Exercise):
        raise ValueError(f"register needs an Exercise, got {type(exercise).__name__}")
    if exercise.name in _REGISTRY and _REGISTRY[exercise.name][1] is not checker:
        raise ValueError(f"exercise {exercise.name!r} is already registered")
    _REGISTRY[exercise.name] = (exercise, checker)


def names() -> list[str]:
    """Every exercise name, in book order (chapters in reading order, then registration order)."""
    order = list(CHAPTERS)
    items = list(_REGISTRY.values())
    rank = {id(e): i for i, (e, _) in enumerate(items)}
    key = lambda e: (order.index(e.chapter) if e.chapter in order else len(order), rank[id(e)])  # noqa: E731
    return [e.name for e, _ in sorted(items, key=lambda it: key(it[0]))]


def _lookup(name: str) -> tuple[Exercise, Callable]:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown exercise {name!r}; known exercises: {', '.join(names())}")
    return _REGISTRY[name]


def info(name: str) -> Exercise:
    """The :class:`Exercise` called ``name`` (ValueError listing the known names if there is none)."""
    return _lookup(name)[0]


_WARM = []


def _warm_up() -> None:
    """Pay once, in this process, for torch's lazy imports (torch.broadcast_shapes imports sympy, ~1 s),
    so that the forked child of every check does not pay it again."""
    if not _WARM:
        import torch
        torch.broadcast_shapes((2, 1), (1, 3))
        _WARM.append(True)


def check(name: str, fn: Callable, *, timeout: float = 5.0) -> Result:
    """Check ``fn`` against exercise ``name``; never raises for a wrong, crashing or slow fn.

    Unknown ``name`` raises ValueError. ``timeout`` (seconds) bounds the whole check.
    """
    exercise, checker = _lookup(name)
    if not callable(fn):
        return Result(name, False, f"未通过：要检查的应当是一个函数，得到的是 {type(fn).__name__}。")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")

    _warm_up()

    def job():
        out = tuple(checker(fn))
        return out if len(out) == 3 else (out[0], out[1], None)

    out = run_with_timeout(job, timeout)
    if out[0] == "timeout":
        label, inputs = out[1], out[2]
        case = f"（情形：{label}）" if label else ""
        msg = (f"未通过{case}：{timeout:g} 秒内没有算完，检查被停止。是不是有一个停不下来的循环，"
               f"或者按元素逐个计算了很大的张量？")
        if inputs:
            msg += f"\n  输入：{inputs}"
        return Result(name, False, msg, "timeout")
    if out[0] == "crash":
        return Result(name, False, f"未通过：检查中途出了意外（{out[1]}）。", "crash")
    passed, message, mistake = out
    return Result(name, bool(passed), message, mistake)


from . import core as _core  # noqa: E402,F401  -- registers the exercises
from . import basics as _basics  # noqa: E402,F401
from . import positions as _positions  # noqa: E402,F401
from . import words as _words  # noqa: E402,F401
from . import heads as _heads  # noqa: E402,F401
from . import models as _models  # noqa: E402,F401
from . import efficient as _efficient  # noqa: E402,F401
from . import serving as _serving  # noqa: E402,F401

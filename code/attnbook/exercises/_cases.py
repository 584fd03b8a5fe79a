"""The case driver shared by every checker: call fn and the reference on each case, compare, explain.

A checker builds a list of :class:`Case` (small, readable ones first) and a list of :class:`Mistake` (the
typical wrong versions, each implemented), and calls :func:`run_cases`. fn runs on every case (on copies of the
inputs, watched by ``_watch``). The message shows the first case where fn disagrees with the reference (input,
expected, got) and the mistake it looks like; then every other mistake the failing cases show, an input fn
changed in place, a call the exercise forbids; and where the chapter explains each.
"""

from __future__ import annotations

import math
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from ._runner import progress
from ._watch import watching

__all__ = ["Case", "Mistake", "Call", "run_cases", "call_here", "compare", "show", "where_in_user_code"]


@dataclass
class Case:
    """One input: ``label`` says in Chinese what it tests (e.g. "整行都被屏蔽")."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    atol: float | None = None   # None: torch.testing's default for the output's dtype
    rtol: float | None = None
    on_error: str = ""       # a hint shown when fn raises on this case (e.g. the odd-d_model trap)


@dataclass
class Mistake:
    """A typical wrong version: ``fn`` implements it; ``short`` (one line) and ``detail`` explain it."""

    key: str
    short: str
    fn: Callable | None
    detail: str = ""
    where: str = ""          # overrides the exercise's section when the explanation lives elsewhere
    test: Callable | None = None   # test(args, kwargs, expected, got) -> bool, where no single output is "the" wrong one


_SEED = [0]      # 0: the cases on the page; the teacher command's --seed N draws others


def set_seed(n: int) -> None:
    """Draw every checker's random cases from seed n (0, the default, gives the cases the page shows)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"seed must be a non-negative int, got {n!r}")
    _SEED[0] = n


def generator(seed: int) -> torch.Generator:
    """The checkers' random source: ``seed`` shifted by the seed set with :func:`set_seed`."""
    return torch.Generator().manual_seed(seed + 1_000_003 * _SEED[0])


def randn(*shape, seed: int = 0, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """A seeded standard-normal tensor times ``scale``: the checkers' random inputs."""
    return (torch.randn(*shape, generator=generator(seed)) * scale).to(dtype)


def _clone(obj):
    if isinstance(obj, Tensor):
        return obj.clone()
    if isinstance(obj, list):
        return [_clone(o) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_clone(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def _num(v: float) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 1e5 else f"{v:.4g}"
    return "0" if s in ("-0", "") else s


def _nested(x) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_nested(e) for e in x) + "]"
    return _num(x)


SMALL = 36   # a tensor with at most this many elements is printed in full


def show(x) -> str:
    """A short Chinese-friendly rendering of a value: small tensors in full, big ones by shape."""
    if isinstance(x, Tensor):
        if x.numel() <= SMALL:
            body = _nested(x.detach().cpu().tolist()) if x.dim() else _num(x.item())
            extra = "" if x.dtype in (torch.float32, torch.bool, torch.int64) else f"，dtype={x.dtype}"
            return body + extra if not extra else f"{body}（{extra[1:]}）"
        return f"形状 {tuple(x.shape)} 的 {x.dtype} 张量"
    if isinstance(x, tuple) and x and all(isinstance(e, Tensor) for e in x):
        return "(" + ", ".join(show(e) for e in x) + ")"
    if isinstance(x, list) and len(x) > 12:
        return repr(x[:12])[:-1] + f", …（共 {len(x)} 项）]"
    if isinstance(x, float):
        return _num(x)
    r = repr(x)
    return r if len(r) <= 200 else r[:200] + "…"


def _type_name(x) -> str:
    return type(x).__name__


def compare(expected, got, atol: float = 1e-5, rtol: float = 1e-4) -> str | None:
    """None when got matches expected, else a one-line Chinese reason."""
    if isinstance(expected, Tensor):
        if not isinstance(got, Tensor):
            hint = ("（返回了多个值？这个练习只返回一个张量）" if isinstance(got, tuple)
                    else "（Python 的 list 不是张量：用 torch.tensor(...) 或张量运算得到结果）" if isinstance(got, list) else "")
            return f"应当返回 torch.Tensor，得到的是 {_type_name(got)}{hint}"
        if got.shape != expected.shape:
            return f"形状不对：期望 {tuple(expected.shape)}，得到 {tuple(got.shape)}"
        if got.dtype != expected.dtype:
            return f"数据类型不对：期望 {expected.dtype}，得到 {got.dtype}"
        e, g = expected.detach().cpu(), got.detach().cpu()
        if not e.is_floating_point():
            bad = int((e != g).sum())
            return None if bad == 0 else f"有 {bad} 个元素不对"
        e, g = e.double(), g.double()
        if torch.isnan(g).any() and not torch.isnan(e).any():
            return "结果里出现了 nan"
        close = torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
        if bool(close.all()):
            return None
        bad_inf = torch.isinf(g) & ~torch.isinf(e)
        if bad_inf.any():
            return f"有 {int(bad_inf.sum())} 个元素应当是有限的数，得到的是 ±inf"
        lost_inf = torch.isinf(e) & ~torch.isinf(g)
        if lost_inf.any():
            return f"有 {int(lost_inf.sum())} 个元素应当是 −inf（或 inf），得到的是有限的数"
        diff = torch.where(close, torch.zeros_like(e), (g - e).abs().nan_to_num(math.inf))
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
        where = f"，在下标 {idx}：期望 {_num(e[idx].item())}，得到 {_num(g[idx].item())}" if idx else ""
        return f"数值不对（{int((~close).sum())} 个元素超出容差{where}）"
    if isinstance(expected, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"应当返回 {len(expected)} 个值的 tuple，得到的是 {_type_name(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            reason = compare(e, g, atol, rtol)
            if reason:
                return f"第 {i + 1} 个返回值：{reason}"
        return None
    if isinstance(expected, list):
        if not isinstance(got, (list, tuple)):
            return f"应当返回 list，得到的是 {_type_name(got)}"
        try:
            g = sorted(tuple(p) if isinstance(p, (list, tuple)) else p for p in got)
        except TypeError:
            return "返回的列表里有无法比较的元素"
        e = sorted(expected)
        if g == e:
            return None
        missing = [p for p in e if p not in g]
        extra = [p for p in g if p not in e]
        parts = []
        if missing:
            parts.append(f"少了 {show(missing)}")
        if extra:
            parts.append(f"多了 {show(extra)}")
        if not parts:
            parts.append(f"个数不对：期望 {len(e)} 项，得到 {len(g)} 项")
        return "；".join(parts)
    if isinstance(expected, (int, float)):
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return f"应当返回一个数，得到的是 {_type_name(got)}"
        return None if math.isclose(got, expected, rel_tol=rtol, abs_tol=atol) else "数值不对"
    return None if got == expected else "结果不对"


_LIBRARY = tuple(p.replace("\\", "/") for p in {os.path.dirname(os.__file__), os.path.dirname(torch.__file__),
                                                   os.path.dirname(os.path.dirname(__file__))})


def where_in_user_code(err: BaseException) -> str:
    """The reader's own line where err was raised: the deepest frame outside Python, torch and attnbook."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if not f.filename.replace("\\", "/").startswith(_LIBRARY)
            and "site-packages" not in f.filename and not f.filename.startswith("<frozen")]
    if not mine:
        return ""
    f = mine[-1]
    line = f"：{f.line.strip()}" if f.line else ""
    name = f.filename.replace("\\", "/")
    if "ipykernel_" in name or name.startswith("<ipython-input"):
        return f"（你的代码单元格第 {f.lineno} 行{line}）"
    return f"（{os.path.basename(name)} 第 {f.lineno} 行{line}）"


@dataclass
class Call:
    """What one call of the reader's function gave: its output, or the error it raised, and what it did."""

    got: Any = None
    error: tuple | None = None          # (type name, message, the reader's line)
    not_implemented: bool = False
    changed: tuple = ()                 # names of the inputs it changed in place
    seen: tuple = ()                    # forbidden calls, non-blockwise reductions (Chinese sentences)


def _changed(before, after) -> bool:
    if isinstance(before, Tensor):
        return not (isinstance(after, Tensor) and after.shape == before.shape and after.dtype == before.dtype
                    and torch.equal(torch.nan_to_num(after), torch.nan_to_num(before))
                    and torch.equal(after.isnan(), before.isnan()))
    if isinstance(before, (list, tuple)):
        return (not isinstance(after, type(before)) or len(after) != len(before)
                or any(_changed(b, a) for b, a in zip(before, after)))
    if isinstance(before, dict):
        return before.keys() != getattr(after, "keys", dict)() or any(_changed(before[k], after[k]) for k in before)
    return False


def call_here(fn: Callable, args: tuple, kwargs: dict, arg_names: Sequence[str] = (), watch: dict | None = None) -> Call:
    """Call fn on copies of the inputs in this process, and say which inputs it changed and what it called."""
    a, k = _clone(args), _clone(kwargs)
    with watching(watch, a) as seen:
        try:
            got = fn(*a, **k)
        except NotImplementedError:
            return Call(not_implemented=True)
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- a reader's bug is reported, never raised
            return Call(error=(type(err).__name__, str(err), where_in_user_code(err)))
    names = list(arg_names) + [f"第 {i + 1} 个参数" for i in range(len(arg_names), len(args))]
    changed = [n for n, b, x in zip(names, args, a) if _changed(b, x)]
    changed += [n for n in kwargs if _changed(kwargs[n], k.get(n))]
    return Call(got=got, changed=tuple(changed), seen=tuple(dict.fromkeys(seen)))


def _inputs(case: Case, arg_names: Sequence[str], brief: bool = False) -> str:
    """The case's inputs; when that runs long (several weight matrices), tensors over 8 elements by shape."""
    fmt = (lambda a: f"形状 {tuple(a.shape)} 的张量" if isinstance(a, Tensor) and a.numel() > 8 else show(a)) \
        if brief else show
    parts = [f"{n} = {fmt(a)}" for n, a in zip(arg_names, case.args)]
    parts += [f"{k} = {fmt(v)}" for k, v in case.kwargs.items()]
    text = "，".join(parts)
    return _inputs(case, arg_names, True) if len(text) > 400 and not brief else text


def _tol(case: Case, expected) -> tuple[float, float]:
    """(atol, rtol): the case's own, else torch.testing's defaults for the expected output's dtype."""
    first = expected[0] if isinstance(expected, tuple) and expected else expected
    dtype = first.dtype if isinstance(first, Tensor) else torch.float64
    atol, rtol = _DEFAULT_TOL.get(dtype, (1e-5, 1.3e-6))
    return (case.atol if case.atol is not None else atol, case.rtol if case.rtol is not None else rtol)


# torch.testing.assert_close's defaults (atol, rtol) by dtype.
_DEFAULT_TOL = {torch.float16: (1e-5, 1e-3), torch.bfloat16: (1e-5, 1.6e-2), torch.float32: (1e-5, 1.3e-6),
                torch.float64: (1e-7, 1e-7), torch.complex64: (1e-5, 1.3e-6), torch.complex128: (1e-7, 1e-7)}


def _agrees(m: Mistake, case: Case, expected, got, tol) -> bool:
    """fn's output on this case is what mistake m gives (for a test-mistake: m's kind of error, or right)."""
    if m.test is not None:
        try:
            return compare(expected, got, *tol) is None or bool(m.test(case.args, case.kwargs, expected, got))
        except Exception:   # noqa: BLE001 -- got is not even of the right kind
            return False
    try:
        wrong = m.fn(*_clone(case.args), **_clone(case.kwargs))
    except Exception:   # noqa: BLE001 -- this mistake crashes here, so it is not what fn did
        return False
    return compare(wrong, got, *tol) is None


def _explains(m: Mistake, case: Case, expected, got, tol) -> bool:
    """m gives fn's (wrong) output on this case, and m's output is wrong there."""
    if m.test is not None:
        try:
            return bool(m.test(case.args, case.kwargs, expected, got))
        except Exception:   # noqa: BLE001
            return False
    try:
        wrong = m.fn(*_clone(case.args), **_clone(case.kwargs))
    except Exception:   # noqa: BLE001
        return False
    return compare(wrong, got, *tol) is None and compare(expected, wrong, *tol) is not None


def _diagnose(mistakes, rows, failing) -> dict:
    """For each failing case, the mistake that explains it and agrees with fn on the most cases."""
    agree = {}
    for m in mistakes:
        agree[m.key] = sum(_agrees(m, c, e, g.got, t) for c, e, g, t in rows if g.error is None)
    found = {}
    for i in failing:
        c, e, g, t = rows[i]
        cands = [m for m in mistakes if _explains(m, c, e, g.got, t)]
        if cands:
            found[i] = max(cands, key=lambda m: agree[m.key])     # first registered wins a tie
    return found


def run_cases(fn: Callable, reference: Callable, cases: Sequence[Case], mistakes: Sequence[Mistake] = (),
              where: str = "", arg_names: Sequence[str] = (), watch: dict | None = None
              ) -> tuple[bool, str, str | None]:
    """Compare fn with reference on every case; (passed, Chinese message, key of the first recognised mistake).

    The message names every mistake the failing cases show, an input changed in place, and a call the
    exercise forbids. ``fn`` may carry ``attnbook_call(args, kwargs, arg_names, watch) -> Call`` (the teacher
    command's worker runs it in another process); otherwise it is called here.
    """
    caller = getattr(fn, "attnbook_call", None) or (lambda a, k, n, w: call_here(fn, a, k, n, w))
    rows, failing, changed, seen, crash = [], [], {}, {}, []
    for case in cases:
        inputs = _inputs(case, arg_names)
        expected = reference(*_clone(case.args), **_clone(case.kwargs))
        progress(case.label, inputs)
        call = caller(case.args, case.kwargs, arg_names, watch)
        if call.not_implemented:
            return False, ("还没有实现：函数还在抛出 NotImplementedError。把 raise 那一行换成你的实现，"
                           "运行定义函数的那一格，再运行检查。"), None
        if call.error is not None:
            kind, text, line = call.error
            crash = [f"未通过（情形：{case.label}）：调用时抛出了 {kind}: {text}"[:300],
                     f"  输入：{inputs}", f"  出错的位置{line}"]
            if case.on_error:
                crash.append(f"  提示：{case.on_error}")
            if not failing:
                extra = _also(rows, failing, {}, changed, seen, mistakes)
                return False, "\n".join(crash + extra + ([f"  见{where}。"] if where else [])), None
            break
        tol = _tol(case, expected)
        rows.append((case, expected, call, tol))
        if compare(expected, call.got, *tol) is not None:
            failing.append(len(rows) - 1)
        for n in call.changed:
            changed.setdefault(n, case.label)
        for s in call.seen:
            seen.setdefault(s, case.label)
    if not failing and not changed and not seen:
        labels = list(dict.fromkeys(c.label for c in cases))   # a label may name several cases (two random draws)
        return True, f"通过：{len(labels)} 个情形都与本书的实现一致（{'；'.join(labels)}）。", None
    found = _diagnose(mistakes, rows, failing)
    if failing:
        i = failing[0]
        case, expected, call, tol = rows[i]
        reason = compare(expected, call.got, *tol)
        m = found.get(i)
        head = f"未通过（情形：{case.label}）：" + (f"看起来像是{m.short}" if m else reason)
        lines = [head, f"  输入：{_inputs(case, arg_names)}", f"  期望：{show(expected)}", f"  得到：{show(call.got)}"]
        if m:
            lines.append(f"  差别：{reason}")
            if m.detail:
                lines.append(f"  说明：{m.detail}")
        section = m.where if m and m.where else where
        key = m.key if m else None
    else:
        lines, key, section = [], ("in_place" if changed else "forbidden"), where
    extra = _also(rows, failing, found, changed, seen, mistakes)
    if crash:
        extra.append("  另外，" + crash[0].removeprefix("未通过") + "".join(f"\n  {c}" for c in crash[1:]))
    if not failing:
        extra[0] = "未通过：输出与本书的实现一致，但" + extra[0].lstrip().removeprefix("另外，")
    return False, "\n".join(lines + extra + ([f"  见{section}。"] if section else [])), key


def _also(rows, failing, found, changed, seen, mistakes) -> list[str]:
    """Lines for the other mistakes: those later failing cases show, inputs changed in place, forbidden calls."""
    out, named = [], set()
    first = found.get(failing[0]) if failing else None
    if first:
        named.add(first.key)
    unexplained = []
    for i in failing[1:]:
        m = found.get(i)
        if m and m.key not in named:
            named.add(m.key)
            out.append(f"  另外（情形：{rows[i][0].label}）：看起来像是{m.short}" + (f"。{m.detail}" if m.detail else ""))
        elif not m and not first and i != failing[0]:
            unexplained.append(rows[i][0].label)
    if unexplained:
        out.append(f"  另外还有 {len(unexplained)} 个情形也不一致：{'；'.join(dict.fromkeys(unexplained))}。")
    for name, label in changed.items():
        out.append(f"  另外，函数改动了输入 {name}（情形：{label}）：调用者手里的张量被改掉了。"
                   f"不要用原地操作（masked_fill_、copy_、sub_、+= 等）改参数；用不带下划线的版本，或先 clone()。")
    for sentence, label in seen.items():
        out.append(f"  另外，{sentence}（情形：{label}）：这个练习要求自己写出这一步。")
    return out

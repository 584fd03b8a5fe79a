"""The case driver shared by every checker: call fn and the reference on each case, compare, explain.

A checker builds a list of :class:`Case` (small, readable ones first) and a list of :class:`Mistake` (the
typical wrong versions, each implemented), and calls :func:`run_cases`. On the first case where fn disagrees
with the reference, the message shows that case (input, expected, got), and if fn's output equals one of the
mistakes' outputs on it, says which mistake it looks like and where the chapter explains it.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from ._runner import progress

__all__ = ["Case", "Mistake", "run_cases", "compare", "show"]


@dataclass
class Case:
    """One input: ``label`` says in Chinese what it tests (e.g. "整行都被遮住")."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    atol: float = 1e-5
    rtol: float = 1e-4
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


def randn(*shape, seed: int = 0, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """A seeded standard-normal tensor times ``scale``: the checkers' random inputs."""
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


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
            hint = "（返回了多个值？这个练习只返回一个张量）" if isinstance(got, (tuple, list)) else ""
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


def _where_in_user_code(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if "attnbook/exercises" not in f.filename.replace("\\", "/")]
    if not mine:
        return ""
    f = mine[-1]
    line = f"：{f.line.strip()}" if f.line else ""
    return f"（第 {f.lineno} 行{line}）"


def _inputs(case: Case, arg_names: Sequence[str]) -> str:
    parts = [f"{n} = {show(a)}" for n, a in zip(arg_names, case.args)]
    parts += [f"{k} = {show(v)}" for k, v in case.kwargs.items()]
    return "，".join(parts)


def _matches(m: Mistake, case: Case, expected, got) -> bool:
    """fn's output equals this mistake's output, which differs from the expected one."""
    if m.test is not None:
        try:
            return bool(m.test(case.args, case.kwargs, expected, got))
        except Exception:   # noqa: BLE001 -- got is not even of the right kind
            return False
    try:
        wrong = m.fn(*_clone(case.args), **_clone(case.kwargs))
    except Exception:   # noqa: BLE001 -- this mistake crashes here, so it is not what fn did
        return False
    return (compare(wrong, got, case.atol, case.rtol) is None
            and compare(expected, wrong, case.atol, case.rtol) is not None)


def _recognise(fn, reference, mistakes, cases, first: int, expected, got) -> Mistake | None:
    """The mistake fn's output matches on the failing case; when several do, the later cases decide."""
    candidates = [m for m in mistakes if _matches(m, cases[first], expected, got)]
    for case in cases[first + 1:]:
        if len(candidates) <= 1:
            break
        try:
            g = fn(*_clone(case.args), **_clone(case.kwargs))
        except (Exception, SystemExit):  # noqa: BLE001
            continue
        kept = []
        for m in candidates:
            if m.test is not None:
                exp = reference(*_clone(case.args), **_clone(case.kwargs))
                if compare(exp, g, case.atol, case.rtol) is None or _matches(m, case, exp, g):
                    kept.append(m)        # fn is right here, or wrong in the way m describes
                continue
            try:
                w = m.fn(*_clone(case.args), **_clone(case.kwargs))
            except Exception:   # noqa: BLE001
                continue
            if compare(w, g, case.atol, case.rtol) is None:
                kept.append(m)
        candidates = kept or candidates
    return candidates[0] if candidates else None


def run_cases(fn: Callable, reference: Callable, cases: Sequence[Case], mistakes: Sequence[Mistake] = (),
              where: str = "", arg_names: Sequence[str] = ()) -> tuple[bool, str, str | None]:
    """Compare fn with reference on every case; (passed, Chinese message, key of the recognised mistake)."""
    for case in cases:
        inputs = _inputs(case, arg_names)
        expected = reference(*_clone(case.args), **_clone(case.kwargs))
        progress(case.label, inputs)
        try:
            got = fn(*_clone(case.args), **_clone(case.kwargs))
        except NotImplementedError:
            return False, ("还没有实现：函数还在抛出 NotImplementedError。把 raise 那一行换成你的实现，"
                           "运行定义函数的那一格，再运行检查。"), None
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- a reader's bug is reported, never raised
            lines = [f"未通过（情形：{case.label}）：调用时抛出了 {type(err).__name__}: {err}"[:300],
                     f"  输入：{inputs}", f"  出错的位置{_where_in_user_code(err)}"]
            if case.on_error:
                lines.append(f"  提示：{case.on_error}")
            if where:
                lines.append(f"  见{where}。")
            return False, "\n".join(lines), None
        reason = compare(expected, got, case.atol, case.rtol)
        if reason is None:
            continue
        found = _recognise(fn, reference, mistakes, cases, cases.index(case), expected, got)
        head = f"未通过（情形：{case.label}）：" + (f"看起来像是{found.short}" if found else reason)
        lines = [head, f"  输入：{inputs}", f"  期望：{show(expected)}", f"  得到：{show(got)}"]
        if found:
            lines.append(f"  差别：{reason}")
            if found.detail:
                lines.append(f"  说明：{found.detail}")
        section = (found.where if found and found.where else where)
        if section:
            lines.append(f"  见{section}。")
        return False, "\n".join(lines), (found.key if found else None)
    labels = list(dict.fromkeys(c.label for c in cases))   # a label may name several cases (two random draws)
    return True, f"通过：{len(labels)} 个情形都与本书的实现一致（{'；'.join(labels)}）。", None

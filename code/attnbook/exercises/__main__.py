"""Teachers: ``python -m attnbook.exercises student.py [more.py ...]`` checks every exercise function in the files.

Prints a table (练习, 结果, 说明 = the message's first line); exit status 0 only if every exercise
function found passes and at least one was found.
"""

from __future__ import annotations

import argparse
import importlib.util
import contextlib
import io
import signal
import sys
import unicodedata
from pathlib import Path

from . import CHAPTERS, check, info, names


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _pad(s: str, w: int) -> str:
    return s + " " * max(0, w - _width(s))


def _load(path: Path, limit: float = 60.0) -> dict:
    """Import a student's file (its top-level code runs, stopped after ``limit`` seconds)."""
    def _alarm(signum, frame):
        raise TimeoutError(f"导入超过 {limit:g} 秒（文件顶层的代码停不下来？）")

    use_alarm = hasattr(signal, "setitimer")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return _exec(path)
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _exec(path: Path) -> dict:
    spec = importlib.util.spec_from_file_location(f"_attnbook_student_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return vars(module)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.exercises",
                                     description="检查学生文件里的练习函数（函数名与练习名相同）。")
    parser.add_argument("files", nargs="*", type=Path, help="学生的 .py 文件")
    parser.add_argument("--timeout", type=float, default=5.0, help="每个练习的时间上限（秒），默认 5")
    parser.add_argument("--list", action="store_true", help="只列出所有练习名")
    args = parser.parse_args(argv)
    if args.list or not args.files:
        for name in names():
            ex = info(name)
            print(f"{ex.signature}    《{CHAPTERS.get(ex.chapter, ex.chapter)}》")
        return 0 if args.list else 2
    all_ok = True
    for path in args.files:
        if len(args.files) > 1:
            print(f"== {path}")
        if not path.is_file():
            print(f"找不到文件：{path}")
            all_ok = False
            continue
        try:
            namespace = _load(path)
        except BaseException as err:  # noqa: BLE001 -- a student's file that does not import is a failure
            print(f"无法导入 {path}：{type(err).__name__}: {err}")
            all_ok = False
            continue
        rows = []
        for name in names():
            fn = namespace.get(name)
            if callable(fn):
                result = check(name, fn, timeout=args.timeout)
                rows.append((name, "通过" if result.passed else "未通过", result.message.splitlines()[0]))
        if not rows:
            print(f"{path} 里没有找到练习函数（函数名应当是练习名之一：{', '.join(names())}）")
            all_ok = False
            continue
        header = ("练习", "结果", "说明")
        w0 = max(_width(r[0]) for r in rows + [header])
        w1 = max(_width(r[1]) for r in rows + [header])
        print(f"{_pad(header[0], w0)}  {_pad(header[1], w1)}  {header[2]}")
        print(f"{'-' * w0}  {'-' * w1}  {'-' * 4}")
        for r in rows:
            print(f"{_pad(r[0], w0)}  {_pad(r[1], w1)}  {r[2]}")
        passed = sum(r[1] == "通过" for r in rows)
        print(f"共 {len(rows)} 个练习，通过 {passed} 个。")
        all_ok = all_ok and passed == len(rows)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

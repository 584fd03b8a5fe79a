"""Teachers: ``python -m attnbook.exercises student.py [more.py ...]`` checks every exercise function in the files.

Each file runs in its own fresh interpreter (``_worker``) with a memory limit and a time limit per exercise; it
receives the cases and sends back only what its functions returned. This process builds the cases, compares and
prints a table (练习, 结果, 说明 = the message's first line), so nothing a file does (exit early, print, patch
the checker, change torch's defaults) can make a wrong function pass or change another file's result. A
student's file still runs with the teacher's rights: grade in a container or a throwaway account.

Exit status 0 only if every file imports, defines at least one exercise function, and every one passes.
``--json PATH`` writes a report per student; ``--seed N`` draws the random cases afresh (the page's are seed 0).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

from . import CHAPTERS, Result, _REGISTRY, info, names
from . import _cases, _runner
from ._cases import Call
from ._worker import recv, send

PACKAGE_ROOT = Path(__file__).resolve().parents[2]     # the folder that holds attnbook


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _pad(s: str, w: int) -> str:
    return s + " " * max(0, w - _width(s))


class _Stopped(BaseException):
    """The worker ran out of time or died (BaseException: run_cases reports only the reader's exceptions)."""


class Worker:
    """A student's file imported in a fresh interpreter; ``fn(name)`` is a stand-in the checkers can call."""

    def __init__(self, path: Path, memory_mb: int):
        req_r, self._req_w = os.pipe()
        self._res_r, res_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]),
                   OMP_NUM_THREADS="1")

        def limits():                                   # in the child, before it runs anything
            import resource
            size = memory_mb * 2 ** 20
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnbook.exercises._worker", str(path.resolve()), str(req_r), str(res_w)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            cwd=path.resolve().parent, pass_fds=(req_r, res_w), start_new_session=True,
            preexec_fn=limits if hasattr(os, "setsid") else None)
        os.close(req_r), os.close(res_w)
        self._out, self._in = os.fdopen(self._req_w, "wb"), os.fdopen(self._res_r, "rb")
        self.start_clock(60.0)

    def cpu(self) -> float:
        """Seconds of CPU the worker has used (wall-clock seconds where /proc is missing)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return time.monotonic()

    def start_clock(self, limit: float) -> None:
        """The limit is on the worker's CPU time (a busy machine does not fail a student); wall time <= 10x."""
        self.limit, self.cpu0, self.wall_deadline = limit, self.cpu(), time.monotonic() + 10 * limit

    def _read(self):
        while not select.select([self._in], [], [], 0.05)[0]:
            if self.cpu() - self.cpu0 > self.limit or time.monotonic() > self.wall_deadline:
                self.kill()
                raise _Stopped("timeout")
        try:
            frame = recv(self._in)
        except Exception:                              # noqa: BLE001 -- not a frame this process accepts
            frame = None
        if frame is None:
            self.kill()
            raise _Stopped("died")
        return frame

    def hello(self, limit: float) -> dict:
        self.start_clock(limit)
        return self._read()

    def fn(self, name: str):
        worker = self

        def call(args, kwargs, arg_names, watch) -> Call:
            try:
                send(worker._out, {"name": name, "args": args, "kwargs": kwargs, "arg_names": tuple(arg_names),
                                   "watch": watch})
            except OSError:
                worker.kill()
                raise _Stopped("died") from None
            r = worker._read()
            try:                                       # a frame the student's code forged is not a reply
                got = r["got"] if "got_type" not in r else type(str(r["got_type"]), (), {})()
                error = None if r["error"] is None else tuple(str(e) for e in r["error"])
                return Call(got=got, error=error, not_implemented=bool(r["not_implemented"]),
                            changed=tuple(str(c) for c in r["changed"]), seen=tuple(str(c) for c in r["seen"]))
            except (KeyError, TypeError, ValueError):
                worker.kill()
                raise _Stopped("died") from None

        def stand_in(*args, **kwargs):                # a checker calling fn directly (mistake recognition)
            c = call(args, kwargs, (), None)
            if c.error or c.not_implemented:
                raise RuntimeError("the student's function raised")
            return c.got

        stand_in.attnbook_call = call
        return stand_in

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        for f in (self._out, self._in):
            try:
                f.close()
            except OSError:
                pass


def _grade_one(worker: Worker, name: str, timeout: float) -> Result:
    _, checker = _REGISTRY[name]
    _runner._last_progress[0] = None
    worker.start_clock(timeout)
    try:
        out = tuple(checker(worker.fn(name)))
    except Exception as err:                           # noqa: BLE001 -- an output no comparison foresaw
        worker.kill()
        return Result(name, False, f"未通过：学生函数的输出无法检查（{type(err).__name__}: {err}）。"[:300], "crash")
    except _Stopped as why:
        label, inputs = _runner._last_progress[0] or ("", "")
        case = f"（情形：{label}）" if label else ""
        if str(why) == "timeout":
            msg = (f"未通过{case}：{timeout:g} 秒内没有算完，检查被停止。是不是有一个停不下来的循环，"
                   f"或者按元素逐个计算了很大的张量？" + (f"\n  输入：{inputs}" if inputs else ""))
            return Result(name, False, msg, "timeout")
        return Result(name, False, f"未通过{case}：学生文件的进程意外退出（os._exit、崩溃或超出内存上限）。", "crash")
    passed, message, mistake = out if len(out) == 3 else (*out, None)
    return Result(name, bool(passed), message, mistake)


def grade(path: Path, timeout: float, memory_mb: int, import_limit: float = 60.0,
          worker: Worker | None = None) -> dict:
    """One student's report: {"file", "error", "results": [{"name", "passed", "mistake", "message"}]}."""
    report = {"file": str(path), "error": None, "results": []}
    if not path.is_file():
        report["error"] = f"找不到文件：{path}"
        return report
    worker = worker or Worker(path, memory_mb)
    try:
        hello = worker.hello(import_limit)
    except _Stopped as why:
        report["error"] = (f"无法导入 {path}：" + (f"导入超过 {import_limit:g} 秒（文件顶层的代码停不下来？）"
                                                  if str(why) == "timeout" else "进程在导入时退出了（os._exit？）"))
        return report
    if not isinstance(hello, dict) or not isinstance(hello.get("functions", []), list):
        worker.kill()
        report["error"] = f"无法导入 {path}：导入时写出了无法识别的内容。"
        return report
    if "import_error" in hello:
        worker.kill()
        report["error"] = f"无法导入 {path}：{hello['import_error']}"
        return report
    found = [n for n in hello.get("functions", []) if n in _REGISTRY]
    for name in names():
        if name not in found:
            continue
        if worker.proc.poll() is not None or worker._in.closed:
            worker = Worker(path, memory_mb)           # the last exercise killed it: a fresh one
            try:
                worker.hello(import_limit)
            except _Stopped:
                report["results"].append({"name": name, "passed": False, "mistake": "crash",
                                          "message": "未通过：学生文件无法再次导入。"})
                continue
        r = _grade_one(worker, name, timeout)
        report["results"].append({"name": r.name, "passed": r.passed, "mistake": r.mistake, "message": r.message})
    worker.kill()
    if not report["results"]:
        report["error"] = f"{path} 里没有找到练习函数（函数名应当是练习名之一：{', '.join(names())}）"
    return report


def _print(report: dict, many: bool) -> None:
    if many:
        print(f"== {report['file']}")
    if report["error"]:
        print(report["error"])
        return
    rows = [(r["name"], "通过" if r["passed"] else "未通过", r["message"].splitlines()[0]) for r in report["results"]]
    header = ("练习", "结果", "说明")
    w0 = max(_width(r[0]) for r in rows + [header])
    w1 = max(_width(r[1]) for r in rows + [header])
    print(f"{_pad(header[0], w0)}  {_pad(header[1], w1)}  {header[2]}")
    print(f"{'-' * w0}  {'-' * w1}  {'-' * 4}")
    for r in rows:
        print(f"{_pad(r[0], w0)}  {_pad(r[1], w1)}  {r[2]}")
    print(f"共 {len(rows)} 个练习，通过 {sum(r['passed'] for r in report['results'])} 个。")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.exercises",
                                     description="检查学生文件里的练习函数（函数名与练习名相同）。"
                                                 "每个文件在自己的新进程里运行，但仍以你的权限运行：请在容器或临时账户里评分。")
    parser.add_argument("files", nargs="*", type=Path, help="学生的 .py 文件")
    parser.add_argument("--timeout", type=float, default=5.0, help="每个练习的时间上限（秒），默认 5")
    parser.add_argument("--memory", type=int, default=4096, help="每个学生进程的内存上限（MB），默认 4096")
    parser.add_argument("--seed", type=int, default=0, help="随机情形的种子；0 = 书页上的情形（默认）")
    parser.add_argument("--json", type=Path, help="把每个学生的结果写进这个 JSON 文件")
    parser.add_argument("--list", action="store_true", help="只列出所有练习名")
    args = parser.parse_args(argv)
    if args.list or not args.files:
        for name in names():
            ex = info(name)
            print(f"{ex.signature}    《{CHAPTERS.get(ex.chapter, ex.chapter)}》")
        return 0 if args.list else 2
    _cases.set_seed(args.seed)
    reports, ahead = [], None
    for i, path in enumerate(args.files):
        worker = ahead if ahead is not None else (Worker(path, args.memory) if path.is_file() else None)
        nxt = args.files[i + 1] if i + 1 < len(args.files) else None
        ahead = Worker(nxt, args.memory) if nxt is not None and nxt.is_file() else None  # imports meanwhile
        report = grade(path, args.timeout, args.memory, worker=worker)
        _print(report, len(args.files) > 1)
        reports.append(report)
    if args.json:
        for r in reports:
            r["passed"] = sum(x["passed"] for x in r["results"])
            r["total"] = len(r["results"])
        args.json.write_text(json.dumps(reports, ensure_ascii=False, indent=1), encoding="utf-8")
    ok = all(not r["error"] and r["results"] and all(x["passed"] for x in r["results"]) for r in reports)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

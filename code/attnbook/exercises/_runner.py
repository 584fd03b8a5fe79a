"""Run a checker on a reader's function with a time limit, never letting its errors escape.

On Linux (Colab, Binder, CI, a local Jupyter kernel), unless CUDA is already in use, the whole check runs in a
forked child: a function
that loops forever, even inside one long C call, is killed when the time is up, and nothing it does
(printing, changing globals, calling ``sys.exit``) reaches the caller. The child reports the case it is
working on before each call, so a timeout names the case. Where ``fork`` is missing, the check runs in
this process (also once CUDA is in use: a forked child cannot use it), stopped by ``signal.setitimer`` when on the main thread (a pure-Python loop is interrupted;
a long C call finishes first), else without a limit.
"""

from __future__ import annotations

import io
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import warnings

__all__ = ["run_with_timeout", "progress", "CheckTimeout"]


class CheckTimeout(BaseException):
    """Raised inside the in-process fallback when the time is up (BaseException: user code rarely catches it)."""


_pipe_fd: int | None = None          # set in the forked child: where progress frames go
_last_progress: list = [None]        # the in-process fallback keeps the current case here


def progress(label: str, inputs: str = "") -> None:
    """Tell the parent which case runs now (called by the case driver before each call of fn)."""
    _last_progress[0] = (label, inputs)
    if _pipe_fd is not None:
        _send(_pipe_fd, ("case", label, inputs))


def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj)
    data = struct.pack("<I", len(data)) + data
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _frames(buf: bytes) -> list:
    out, i = [], 0
    while i + 4 <= len(buf):
        (n,) = struct.unpack("<I", buf[i:i + 4])
        if i + 4 + n > len(buf):
            break
        out.append(pickle.loads(buf[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def _can_fork() -> bool:
    if not (hasattr(os, "fork") and sys.platform.startswith("linux")) or os.environ.get("ATTNBOOK_EXERCISES_NOFORK"):
        return False
    torch = sys.modules.get("torch")
    # CUDA cannot be used in a forked child: a reader's code that puts a tensor on the GPU would fail there.
    return not (torch is not None and torch.cuda.is_initialized())


def run_with_timeout(job, timeout: float):
    """Call job() -> (passed, message, mistake) within timeout seconds.

    Returns that triple, or ("timeout", label, inputs) when time ran out, or ("crash", text, None) when the
    child died without answering (a segfault, os._exit in fn).
    """
    if _can_fork():
        out = _run_forked(job, timeout)
        if out != ("hung",):
            return out
        # The child never reached the reader's function: something of this process (a lock held by another
        # thread at fork time) hung it, not the reader's code. Run the check here instead.
    return _run_inline(job, timeout)


def _run_forked(job, timeout: float):
    global _pipe_fd
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "process is multi-threaded, fork() may deadlock": see below
        pid = os.fork()
    if pid == 0:                                 # the child: never return from here
        code = 0
        try:
            os.close(r)
            _pipe_fd = w
            # A Jupyter kernel's stdout talks to ZeroMQ through a thread that does not exist in the child.
            sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
            try:
                import torch
                torch.set_num_threads(1)         # the OpenMP pool of the parent is not usable after fork
            except Exception:
                pass
            _send(w, ("result",) + tuple(job()))
        except BaseException as err:             # noqa: BLE001 -- anything, even SystemExit, ends here
            code = 1
            try:
                _send(w, ("crash", f"{type(err).__name__}: {err}", None))
            except BaseException:
                pass
        finally:
            os._exit(code)
    os.close(w)
    buf, deadline, done = b"", time.monotonic() + timeout, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:
                done = True
                break
            buf += chunk
    finally:
        os.close(r)
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
    frames = _frames(buf)
    for f in reversed(frames):
        if f[0] == "result":
            return f[1:]
        if f[0] == "crash":
            return f
    if not done and not frames:
        return ("hung",)
    if not done:
        case = next((f for f in reversed(frames) if f[0] == "case"), ("case", "", ""))
        return ("timeout", case[1], case[2])
    return ("crash", "检查进程意外退出（函数里是否调用了 os._exit 或让解释器崩溃？）", None)


def _run_inline(job, timeout: float):
    _last_progress[0] = None
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if not use_alarm:
        return _guard(job)

    def _alarm(signum, frame):
        raise CheckTimeout()

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return _guard(job)
    except CheckTimeout:
        label, inputs = _last_progress[0] or ("", "")
        return ("timeout", label, inputs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _guard(job):
    try:
        return tuple(job())
    except CheckTimeout:
        raise
    except BaseException as err:  # noqa: BLE001 -- as in the forked child: report, never raise
        if isinstance(err, KeyboardInterrupt):
            raise
        return ("crash", f"{type(err).__name__}: {err}", None)

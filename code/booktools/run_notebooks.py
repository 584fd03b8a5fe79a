"""Execute notebooks top to bottom, each in a fresh kernel, several side by side.

One mechanism for the book build (``parallel_execution``), ``make robustness`` and the reader-environment
tests; also a command for the weekly Colab check: ``python run_notebooks.py _build/notebooks``.
Only needs nbclient and nbformat, so it runs in a bare Colab-like environment.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

# One BLAS/OpenMP thread per kernel: kernels side by side do not fight over the cores (torch itself is set
# to one thread by attnbook.start_chapter, for numbers that do not depend on the core count).
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


@dataclass
class Run:
    """One notebook to execute: in ``cwd`` (None: a fresh empty folder), with extra environment variables."""

    name: str
    notebook: nbformat.NotebookNode
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    kernel_name: str = "python3"
    seconds: float = 0.0
    error: BaseException | None = None   # an exception that stopped the run (timeout, dead kernel, …)

    @property
    def errors(self) -> list[str]:
        """What went wrong: the stopping exception and every error output (empty when every cell ran)."""
        found = [f"{type(self.error).__name__}: {self.error}"] if self.error else []
        return found + errors(self.notebook)


def budget(nb: nbformat.NotebookNode) -> float:
    return float(nb.metadata.get("budget_seconds", 0))


async def _run_one(run: Run, slots: asyncio.Semaphore, timeout: int, allow_errors: bool, report) -> None:
    async with slots:
        with tempfile.TemporaryDirectory() as empty:
            client = NotebookClient(run.notebook, timeout=timeout, kernel_name=run.kernel_name,
                                    allow_errors=allow_errors, record_timing=False,
                                    resources={"metadata": {"path": str(run.cwd or empty)}})
            start = time.perf_counter()
            try:
                await client.async_execute(env={**os.environ, **ONE_THREAD, **run.env})  # the kernel's env
            except Exception as exc:  # noqa: BLE001 - reported through run.errors
                run.error = exc
            run.seconds = time.perf_counter() - start
        if report:
            report(run)


def execute_all(runs: list[Run], workers: int | None = None, timeout: int = 900,
                allow_errors: bool = True, report: Callable[[Run], None] | None = None) -> list[Run]:
    """Execute every run, ``workers`` (default: the core count) at a time, longest budget first; returns ``runs``.

    With ``allow_errors`` every cell runs and errors are read from the outputs; without it a run stops at
    its first failing cell (``run.error``). ``report`` is called with each run as it finishes.
    """
    workers = max(1, min(len(runs), workers or os.cpu_count() or 1))

    async def main():
        slots = asyncio.Semaphore(workers)
        order = sorted(runs, key=lambda r: -budget(r.notebook))
        await asyncio.gather(*(_run_one(r, slots, timeout, allow_errors, report) for r in order))

    # In a thread of its own: the caller's thread may already run an event loop (Playwright's sync API in a
    # pytest session, a Jupyter kernel), and asyncio.run refuses to start inside one.
    failure: list[BaseException] = []

    def loop():
        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=loop, name="execute_all")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return runs


def execute(path: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Run one notebook in a fresh kernel from an empty folder (on Colab there is no checkout beside it)."""
    run = Run(path.stem, nbformat.read(path, as_version=4))
    execute_all([run], timeout=timeout)
    if run.error:
        raise run.error
    return run.notebook


def errors(nb: nbformat.NotebookNode) -> list[str]:
    """``ename: evalue [in: first line of the cell]`` for every error output."""
    return [f"{o.get('ename')}: {o.get('evalue')} [in: {c.source.strip().splitlines()[0][:80]}]"
            for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "error"]


def text_outputs(nb: nbformat.NotebookNode) -> dict[str, list[str]]:
    """Source -> text outputs of every code cell whose outputs must not change between runs.

    Left out: cells tagged ``timing`` (wall-clock measurements) and the provenance line.
    """
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or "timing" in cell.metadata.get("tags", []) \
                or "provenance()" in cell.source:
            continue
        streams = [o.text for o in cell.get("outputs", []) if o.output_type == "stream"]
        # myst-nb's merge_streams puts every stream into the first and may leave the others behind.
        if len(streams) > 1 and streams[0].endswith("".join(streams[1:])):
            streams = streams[:1]
        # It also strips each chunk the kernel happened to send and adds a newline, so where the
        # chunks split is visible as whitespace: compare the streams without it.
        text = re.sub(r"\s+", "", "".join(streams))
        plain = [o["data"]["text/plain"] for o in cell.get("outputs", []) if "text/plain" in o.get("data", {})]
        out[cell.source] = [text] + plain
    return out


def print_run(run: Run) -> None:
    status = "ok" if not run.errors else "FAILED: " + "; ".join(run.errors)
    print(f"{run.name}: {run.seconds:.1f} s {status}", flush=True)


def main(folder: str) -> int:
    runs = [Run(p.stem, nbformat.read(p, as_version=4)) for p in sorted(Path(folder).rglob("*.ipynb"))]
    execute_all(runs, report=print_run)
    return 1 if any(r.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "_build/notebooks"))

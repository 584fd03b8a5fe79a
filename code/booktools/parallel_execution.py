"""Sphinx extension: execute the chapters Sphinx is about to read side by side, into myst-nb's cache.

myst-nb executes notebooks one at a time, while each is read. Before reading starts, this runs every
chapter that is not yet in the execution cache, ``os.cpu_count()`` kernels at a time (longest
``budget_seconds`` first), and stores the results exactly as myst-nb would; myst-nb then finds them all
in the cache. Each kernel gets one BLAS/OpenMP thread, so two kernels do not fight over two cores
(``attnbook.start_chapter`` sets torch to one thread anyway, for numbers that do not depend on the
machine's core count). A chapter that fails here is not cached: myst-nb runs it again and reports it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path, PurePosixPath

from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from myst_nb.core.read import create_nb_reader
from nbclient import NotebookClient
from sphinx.util import logging

logger = logging.getLogger(__name__)
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def pending_notebooks(env, docnames, cache) -> list[tuple[str, Path, object, object]]:
    """(docname, path, notebook, reader) for each doc that is a notebook missing from the cache."""
    config = env.mystnb_config
    out = []
    for docname in docnames:
        path = Path(env.doc2path(docname))
        if any(PurePosixPath(path.as_posix()).match(p) for p in config.execution_excludepatterns):
            continue  # myst-nb does not execute these either
        text = path.read_text(encoding="utf-8")
        reader = create_nb_reader(str(path), env.myst_config, config, text)
        if reader is None:
            continue
        notebook = reader.read(text)
        try:
            cache.match_cache_notebook(notebook)
        except KeyError:
            out.append((docname, path, notebook, reader))
    return out


async def _execute_all(jobs, config, workers: int) -> list[tuple[float, BaseException | None]]:
    slots = asyncio.Semaphore(workers)

    async def run(path: Path, notebook) -> tuple[float, BaseException | None]:
        async with slots:
            start = time.perf_counter()
            client = NotebookClient(notebook, timeout=config.execution_timeout,
                                    allow_errors=config.execution_allow_errors, record_timing=False,
                                    resources={"metadata": {"path": str(path.parent)}})
            error = None
            try:
                await client.async_execute(env={**os.environ, **ONE_THREAD})  # the kernel's environment
            except Exception as exc:  # noqa: BLE001 - not cached: myst-nb runs the chapter again and reports it
                error = exc
            return time.perf_counter() - start, error

    return await asyncio.gather(*(run(path, nb) for _, path, nb, _ in jobs))


def execute_pending(app, env, docnames) -> None:
    config = env.mystnb_config
    if config.execution_mode != "cache":
        return
    cache = get_cache(config.execution_cache_path)
    jobs = pending_notebooks(env, docnames, cache)
    if not jobs:
        return
    jobs.sort(key=lambda job: -float(job[2].metadata.get("budget_seconds", 0)))  # longest first
    workers = min(len(jobs), os.cpu_count() or 1)
    logger.info(f"executing {len(jobs)} notebooks, {workers} at a time")
    results = asyncio.run(_execute_all(jobs, config, workers))
    for (docname, path, notebook, reader), (seconds, error) in zip(jobs, results):
        if error is not None:
            logger.info(f"{docname}: failed in parallel execution ({type(error).__name__}); myst-nb runs it again")
            continue
        record = cache.add_nb_to_project(str(path), read_data=reader.read_fmt)
        cache.cache_notebook_bundle(CacheBundleIn(notebook, record.uri, data={"execution_seconds": seconds}),
                                    check_validity=False, overwrite=True)
        logger.info(f"{docname}: executed in {seconds:.1f} s")


def setup(app):
    app.connect("env-before-read-docs", execute_pending)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

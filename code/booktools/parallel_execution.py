"""Sphinx extension: execute the chapters Sphinx is about to read side by side, into myst-nb's cache.

myst-nb executes notebooks one at a time, while each is read. Before reading starts, this runs every
chapter that is not yet in the execution cache, ``os.cpu_count()`` kernels at a time (longest
``budget_seconds`` first), and stores the results exactly as myst-nb would; myst-nb then finds them all
in the cache. Each kernel gets one BLAS/OpenMP thread, so two kernels do not fight over two cores
(``attnbook.start_chapter`` sets torch to one thread anyway, for numbers that do not depend on the
machine's core count). A chapter that fails here is not cached: myst-nb runs it again and reports it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from myst_nb.core.read import create_nb_reader
from sphinx.util import logging

from run_notebooks import Run, execute_all

GLUE_VARIABLE = "ATTNBOOK_GLUE"  # attnbook.book.GLUE_VARIABLE (the build must not import torch)

logger = logging.getLogger(__name__)


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


def execute_pending(app, env, docnames) -> None:
    config = env.mystnb_config
    if config.execution_mode != "cache":
        return
    cache = get_cache(config.execution_cache_path)
    jobs = pending_notebooks(env, docnames, cache)
    if not jobs:
        return
    logger.info(f"executing {len(jobs)} notebooks, {min(len(jobs), os.cpu_count() or 1)} at a time")
    runs = execute_all([Run(docname, notebook, path.parent) for docname, path, notebook, _ in jobs],
                       timeout=config.execution_timeout, allow_errors=config.execution_allow_errors)
    for (docname, path, notebook, reader), run in zip(jobs, runs):
        if run.error is not None:
            logger.info(f"{docname}: failed in parallel execution ({type(run.error).__name__}); myst-nb runs it again")
            continue
        record = cache.add_nb_to_project(str(path), read_data=reader.read_fmt)
        cache.cache_notebook_bundle(CacheBundleIn(notebook, record.uri, data={"execution_seconds": run.seconds}),
                                    check_validity=False, overwrite=True)
        logger.info(f"{docname}: executed in {run.seconds:.1f} s")


def setup(app):
    # Every kernel the build starts (ours, or myst-nb's for a chapter that failed here) inherits this:
    # attnbook.glue then emits the bundle myst-nb's {glue} roles read.
    os.environ[GLUE_VARIABLE] = "1"
    app.connect("env-before-read-docs", execute_pending)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

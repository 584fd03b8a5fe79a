"""Sphinx extension: keep the outputs in ``_build/jupyter_execute/*.ipynb`` when a chapter comes from the cache.

myst-nb 1.4 writes each chapter's executed notebook beside the HTML, but when the execution cache
already holds the chapter it writes the notebook it read, without outputs (``sphinx_.py`` writes
``notebook``, not the merged ``nb_client.notebook``). The provenance page and the reproducibility
test read those notebooks, so after myst-nb has written one, put the cached outputs back in.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from jupyter_cache import get_cache


def restore_cached_outputs(app, doctree) -> None:
    config = app.env.mystnb_config
    path = Path(config.output_folder) / f"{app.env.docname}.ipynb"
    if config.execution_mode != "cache" or not path.exists():
        return
    notebook = nbformat.read(path, as_version=4)
    if any(cell.get("outputs") for cell in notebook.cells):
        return                                   # executed in this build: myst-nb wrote the outputs
    try:
        _, merged = get_cache(config.execution_cache_path).merge_match_into_notebook(notebook)
    except KeyError:                             # not in the cache: nothing was executed
        return
    path.write_text(nbformat.writes(merged), encoding="utf-8")


def setup(app):
    app.connect("doctree-read", restore_cached_outputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

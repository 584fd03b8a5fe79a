"""Sphinx extension: collect the text of every figure the chapters drew into ``_build/figure-text.json``.

In the build each figure a cell shows carries the text it drew (titles, axis and tick labels, legends,
annotations, colour-bar labels) in its output's metadata, key ``attnbook_text`` (``attnbook.plot``,
switched on by ``ATTNBOOK_GLUE``). After the build this reads the executed notebooks myst-nb wrote
(``_build/jupyter_execute``, with the cached outputs restored by ``executed_notebooks``) and writes
``{docname: [text, …]}``; ``tests/test_figure_text.py`` checks every string against an allow-list.

It also fails the build on an error output: a figure whose glyph no font has raises while IPython displays
it, which leaves a traceback in the cell but does not stop the kernel (``nb_execution_raise_on_error``
only sees exceptions of the cell's own code).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from sphinx.util import logging

TEXT_METADATA = "attnbook_text"  # attnbook.plot.TEXT_METADATA (the build must not import torch)
OUTPUT_NAME = "figure-text.json"

logger = logging.getLogger(__name__)


def notebook_figure_text(nb: nbformat.NotebookNode) -> list[str]:
    """The recorded text of every figure in the notebook's outputs, in order."""
    out = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for value in output.get("metadata", {}).values():
                if isinstance(value, dict) and TEXT_METADATA in value:
                    out.extend(value[TEXT_METADATA])
    return out


def error_outputs(nb: nbformat.NotebookNode) -> list[str]:
    """``ename: evalue`` of each error output outside cells tagged ``raises-exception``."""
    return [f"{o.get('ename')}: {o.get('evalue')}"[:500] for c in nb.cells if c.cell_type == "code"
            and "raises-exception" not in c.get("metadata", {}).get("tags", [])
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


def collect(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    folder = Path(app.env.mystnb_config.output_folder)
    record = {}
    for docname in sorted(app.env.found_docs):
        path = folder / f"{docname}.ipynb"
        if not path.exists():
            continue
        nb = nbformat.read(path, as_version=4)
        for error in error_outputs(nb):
            logger.warning(f"{docname}: a cell shows an error: {error}", location=docname)
        texts = notebook_figure_text(nb)
        if texts or any(c.get("outputs") for c in nb.cells):
            record[docname] = texts
    out = Path(app.outdir).parent / OUTPUT_NAME
    out.write_text(json.dumps(record, ensure_ascii=False, indent=1), encoding="utf-8")
    logger.info(f"figure text of {len(record)} notebooks written to {out}")


def setup(app):
    app.connect("build-finished", collect)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

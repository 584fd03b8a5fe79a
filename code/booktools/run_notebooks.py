"""Execute generated notebooks top to bottom, each in a fresh kernel run from an empty folder.

Used by the tests and by the weekly Colab check: ``python run_notebooks.py _build/notebooks``.
Only needs nbclient, nbformat and ipykernel, so it runs in a bare Colab-like environment.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Run one notebook in a fresh kernel and return it with its outputs."""
    nb = nbformat.read(path, as_version=4)
    # An empty working folder: on Colab there is no repository checkout beside the notebook.
    with tempfile.TemporaryDirectory() as cwd:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": cwd}}).execute()
    return nb


def errors(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells if c.cell_type == "code"
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


def run_notebook(path: Path, timeout: int = 900) -> list[str]:
    """Run one notebook; return its error messages (empty when every cell ran)."""
    return errors(execute(path, timeout))


def main(folder: str) -> int:
    failed = 0
    for path in sorted(Path(folder).rglob("*.ipynb")):
        start = time.perf_counter()
        problems = run_notebook(path)
        status = "ok" if not problems else "FAILED: " + "; ".join(problems)
        print(f"{path}: {time.perf_counter() - start:.1f} s {status}", flush=True)
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "_build/notebooks"))

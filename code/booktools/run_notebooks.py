"""Execute generated notebooks top to bottom, each in a fresh kernel run from an empty folder.

Used by the tests and by the weekly Colab check: ``python run_notebooks.py _build/notebooks``.
Only needs nbclient, nbformat and ipykernel, so it runs in a bare Colab-like environment.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def run_notebook(path: Path, timeout: int = 900) -> list[str]:
    """Run one notebook; return its error messages (empty when every cell ran)."""
    nb = nbformat.read(path, as_version=4)
    # An empty working folder: on Colab there is no repository checkout beside the notebook.
    with tempfile.TemporaryDirectory() as cwd:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": cwd}})
        client.execute()
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "error"]


def main(folder: str) -> int:
    failed = 0
    for path in sorted(Path(folder).rglob("*.ipynb")):
        start = time.perf_counter()
        errors = run_notebook(path)
        status = "ok" if not errors else "FAILED: " + "; ".join(errors)
        print(f"{path}: {time.perf_counter() - start:.1f} s {status}", flush=True)
        failed += bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "_build/notebooks"))

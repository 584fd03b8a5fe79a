"""``make mutation``: mutmut over the core modules of ``attnbook``, then a per-module report.

mutmut names a mutant by its file's path (``src/`` stripped) and must import the mutated copy under the
same name, so it runs in ``_build/mutation/``, a copy laid out as ``src/attnbook/`` + ``tests/`` +
``pyproject.toml`` (whose ``[tool.mutmut]`` says which modules to mutate and which tests to run).
Files are copied only when they changed, so mutmut's results in ``_build/mutation/mutants/`` carry over
between runs and only changed functions are tested again; ``--fresh`` starts from nothing.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mutation_report import write_report

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "_build" / "mutation"


def sync_tree(src: Path, dst: Path) -> None:
    """Make dst a copy of src (no __pycache__), touching only files whose content changed."""
    wanted = {p.relative_to(src) for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    for rel in sorted(wanted):
        target = dst / rel
        if not target.exists() or not filecmp.cmp(src / rel, target, shallow=False):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, target)  # copy2 keeps mtime: mutmut re-mutates a file newer than its mutant
    if dst.exists():
        for p in dst.rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and p.relative_to(dst) not in wanted:
                p.unlink()


def prepare(fresh: bool) -> None:
    if fresh:
        shutil.rmtree(WORK, ignore_errors=True)
    sync_tree(ROOT / "code" / "attnbook", WORK / "src" / "attnbook")
    sync_tree(ROOT / "tests", WORK / "tests")
    for name in ("pyproject.toml",):
        if not (WORK / name).exists() or not filecmp.cmp(ROOT / name, WORK / name, shallow=False):
            shutil.copy2(ROOT / name, WORK / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="drop earlier results and test every mutant")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at a time (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "mutation.md")
    parser.add_argument("mutants", nargs="*", help="only these mutants (globs, e.g. 'attnbook.masks.*')")
    args = parser.parse_args()

    prepare(args.fresh)
    # One thread per test run: mutants run side by side, and torch's thread pool would only contend.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    mutmut = Path(sys.executable).parent / "mutmut"
    start = time.monotonic()
    run = subprocess.run([str(mutmut), "run", "--max-children", str(args.max_children), *args.mutants],
                         cwd=WORK, env=env)
    seconds = time.monotonic() - start
    if run.returncode != 0:
        print(f"mutmut run failed (exit {run.returncode})", file=sys.stderr)
        return run.returncode
    report = write_report(WORK, ROOT / "tests" / "mutation_equivalent.toml", args.out, seconds)
    print(report)
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

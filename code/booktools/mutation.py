"""``make mutation``: mutmut over the core modules of ``attnbook``, each against its own unit tests.

For each module listed in ``[tool.attnbook.mutation]`` of pyproject.toml (module = its test files), mutmut
runs in ``_build/mutation/<module>/``, a copy laid out as ``src/attnbook/`` + ``tests/`` + a pyproject.toml
whose ``[tool.mutmut]`` mutates that module only and selects its tests. (mutmut names a mutant by its
file's path with ``src/`` stripped, and must import the mutated copy under the same name, hence the layout.)
Only changed files are copied, so mutmut's results carry over between runs and only changed functions are
tested again; ``--fresh`` starts from nothing, and ``--retest-survivors`` runs the survivors (and mutants
no test reached) against the current tests, after tests were added. Writes mutation_report.py's report.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from mutation_report import write_report

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "_build" / "mutation"


def test_map() -> dict[str, list[str]]:
    """Core module -> its unit test files, in the order they are run."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["attnbook"]["mutation"]


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


def mutmut_config(module: str, tests: list[str]) -> str:
    quoted = lambda items: "[" + ", ".join(f'"{x}"' for x in items) + "]"  # noqa: E731
    return (f'\n[tool.mutmut]\nsource_paths = ["src/attnbook"]\nonly_mutate = ["src/attnbook/{module}.py"]\n'
            f"pytest_add_cli_args_test_selection = {quoted(tests)}\n"
            'pytest_add_cli_args = ["-p", "no:cacheprovider"]\n')


def prepare(module: str, tests: list[str], fresh: bool) -> Path:
    work = WORK / module
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    sync_tree(ROOT / "code" / "attnbook", work / "src" / "attnbook")
    sync_tree(ROOT / "tests", work / "tests")
    # The project's pytest settings (markers, options) plus this module's mutmut settings.
    text = (ROOT / "pyproject.toml").read_text() + mutmut_config(module, tests)
    config = work / "pyproject.toml"
    if not config.exists() or config.read_text() != text:
        config.write_text(text)
    return work


def survivors(work: Path, module: str) -> list[str]:
    """Mutants that survived or that no test reached, from mutmut's results."""
    meta = work / "mutants" / "src" / "attnbook" / f"{module}.py.meta"
    if not meta.exists():
        return []
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return sorted(name for name, code in codes.items() if code in (0, 33))  # 0 survived, 33 no tests


def main() -> int:
    modules = test_map()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", default=",".join(modules), help="comma-separated (default: all, in order)")
    parser.add_argument("--fresh", action="store_true", help="drop earlier results and test every mutant")
    parser.add_argument("--retest-survivors", action="store_true",
                        help="run the survivors again (after adding tests); new or changed mutants are run too")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at a time (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "mutation.md")
    args = parser.parse_args()
    chosen = args.modules.split(",")
    unknown = set(chosen) - set(modules)
    if unknown:
        parser.error(f"unknown modules {sorted(unknown)}; known: {', '.join(modules)}")

    # One thread per test run: mutants run side by side, and torch's thread pool would only contend.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    mutmut = Path(sys.executable).parent / "mutmut"
    failed = []
    for module in chosen:
        work = prepare(module, modules[module], args.fresh)
        print(f"== {module}: mutants against {' '.join(modules[module])}", flush=True)
        start = time.monotonic()
        command = [str(mutmut), "run", "--max-children", str(args.max_children)]
        run = subprocess.run(command, cwd=work, env=env)
        if run.returncode == 0 and args.retest_survivors and survivors(work, module):
            run = subprocess.run(command + survivors(work, module), cwd=work, env=env)
        (work / "run-seconds.txt").write_text(f"{time.monotonic() - start:.0f}\n")
        if run.returncode != 0:
            failed.append(module)
    print(write_report(WORK, list(modules), ROOT / "tests" / "mutation_equivalent.toml", args.out))
    print(f"report: {args.out}")
    if failed:
        print(f"mutmut failed for: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

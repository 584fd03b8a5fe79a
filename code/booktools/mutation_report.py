"""Per-module mutation report from mutmut's results (``make mutation`` calls it; runnable alone).

A surviving mutant is either killed by a test or listed in ``tests/mutation_equivalent.toml`` with a reason.
Each entry names the mutant and the line it changes to, so a listing that no longer describes the same
mutant (mutmut renumbers a function's mutants when the function changes) counts as a survivor again.

    score = killed / (total - equivalent)
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from collections import Counter
from pathlib import Path

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

GOAL = 0.90


def mutated_lines(diff: str) -> str:
    """The lines a mutant puts in, stripped and joined: what an equivalence entry records."""
    return " / ".join(line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))


def classify(work: Path, modules: list[str], equivalent: dict):
    """Count each module's mutants by status; collect survivors' diffs and stale equivalence entries."""
    counts, survivors, stale = {}, {}, []
    seen = set()
    old = os.getcwd()
    for module in modules:
        path = Path("src/attnbook") / f"{module}.py"
        if not (work / module / "mutants" / f"{path}.meta").exists():
            continue  # not run yet
        os.chdir(work / module)  # mutmut reads mutants/<path> relative to the folder it ran in
        try:
            data = SourceFileMutationData(path=path)
            data.load()
            c, s = Counter(), []
            for name, code in sorted(data.exit_code_by_key.items()):
                status = status_by_exit_code[code]
                if status == "survived":
                    diff = get_diff_for_mutant(name, path=path)
                    entry = equivalent.get(name)
                    if entry is not None and entry.get("reason") and entry["line"] == mutated_lines(diff):
                        status = "equivalent"
                        seen.add(name)
                    else:
                        s.append((name, diff))
                elif name in equivalent and status != "not checked":
                    stale.append(f"{name}: listed as equivalent but {status}")
                    seen.add(name)
                c[status] += 1
            counts[module], survivors[module] = c, s
        finally:
            os.chdir(old)
    stale += [f"{name}: listed as equivalent but not a surviving mutant with that line"
              for name in sorted(set(equivalent) - seen) if name.split(".")[1] in counts]
    return counts, survivors, stale


def run_seconds(work: Path, module: str) -> float | None:
    path = work / module / "run-seconds.txt"
    return float(path.read_text()) if path.exists() else None


def write_report(work: Path, modules: list[str], equivalent_file: Path, out: Path) -> str:
    equivalent = tomllib.loads(equivalent_file.read_text()) if equivalent_file.exists() else {}
    counts, survivors, stale = classify(work, modules, equivalent)
    seconds = {m: run_seconds(work, m) for m in counts}
    total_min = sum(s or 0 for s in seconds.values()) / 60
    lines = ["# Mutation testing (mutmut)", "",
             f"score = killed / (total − equivalent); goal ≥ 90 % per module. Last `mutmut run` of the modules "
             f"shown: {total_min:.0f} min in all (a rerun only tests functions that changed).", "",
             "| module | mutants | killed | survived | equivalent | timeout | no tests | other | score | run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    named = ("killed", "survived", "equivalent", "timeout", "no tests")
    for module, c in counts.items():
        total = sum(c.values())
        other = total - sum(c[k] for k in named)
        denominator = total - c["equivalent"]
        score = f"{c['killed'] / denominator:.1%}" if denominator else "–"
        if c["not checked"]:
            score += f" ({c['not checked']} not checked)"
        elif denominator and c["killed"] / denominator < GOAL:
            score += " ✗"
        run = f"{seconds[module] / 60:.1f} min" if seconds[module] is not None else "–"
        lines.append(f"| {module} | {total} | {c['killed']} | {c['survived']} | {c['equivalent']} | "
                     f"{c['timeout']} | {c['no tests']} | {other} | {score} | {run} |")
    summary = "\n".join(lines)
    if stale:
        lines += ["", "## Stale entries in tests/mutation_equivalent.toml", ""] + [f"- {s}" for s in stale]
    for module, s in survivors.items():
        if s:
            lines += ["", f"## Surviving mutants: {module}", ""]
            for name, diff in s:
                lines += [f"`{name}`", "", "```diff", diff, "```", ""]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return summary + (f"\n{len(stale)} stale entries in {equivalent_file.name}" if stale else "")


def stubs(work: Path, modules: list[str], equivalent_file: Path) -> str:
    """TOML entries (reason left empty, to fill in) for every survivor not yet listed as equivalent."""
    equivalent = tomllib.loads(equivalent_file.read_text()) if equivalent_file.exists() else {}
    _, survivors, _ = classify(work, modules, equivalent)
    out = []
    for s in survivors.values():
        for name, diff in s:
            line = mutated_lines(diff).replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'["{name}"]\nline = "{line}"\nreason = ""\n')
    return "\n".join(out)


def main() -> int:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=root / "_build" / "mutation")
    parser.add_argument("--equivalent", type=Path, default=root / "tests" / "mutation_equivalent.toml")
    parser.add_argument("--out", type=Path, default=root / "_build" / "mutation.md")
    parser.add_argument("--stubs", action="store_true", help="print entries to fill in for the survivors")
    args = parser.parse_args()
    modules = list(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["attnbook"]["mutation"])
    if args.stubs:
        print(stubs(args.work, modules, args.equivalent))
        return 0
    print(write_report(args.work, modules, args.equivalent, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

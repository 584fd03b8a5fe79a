"""How long each chapter's main text is: CJK characters outside code and outside collapsed blocks.

What a reader who never opens a dropdown reads: front matter, code cells, ``literalinclude`` and glossary
blocks, every block with ``:class: dropdown`` (solutions, side notes) are left out; exercises count.
``python code/booktools/main_text.py`` prints a Markdown table; ``--rev REV`` adds the count at a git revision
beside it; ``--max N`` exits 1 when a chapter exceeds N. ``--collapsed`` counts the collapsed blocks too (everything
but code, listings, glossary blocks and exercise solutions: the second edition's measure of a chapter's length).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
OPEN = re.compile(r"^(`{3,}|:{3,})\{([\w-]+)\}")
SKIPPED = {"code-cell", "literalinclude", "glossary", "solution", "bibliography"}
EXEMPT = {"glossary", "errata", "bibliography", "provenance", "gallery", "index", "notation"}


def main_text(source: str, collapsed: bool = False) -> str:
    """The lines of a MyST chapter that a reader sees without opening anything (``collapsed``: or by opening
    a collapsed block other than a solution)."""
    lines = source.splitlines()
    if lines and lines[0] == "---":  # front matter
        end = lines.index("---", 1)
        lines = lines[end + 1:]
    kept, stack = [], []  # stack: (fence, skipped) of the open directive blocks
    gated = False  # between {solution-start} and {solution-end}: a solution that holds code cells
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = OPEN.match(line)
        if opened:
            fence, name = opened.groups()
            gated = {"solution-start": True, "solution-end": False}.get(name, gated)
            options = []
            j = i + 1
            while j < len(lines) and lines[j].startswith(":") and not lines[j].startswith(":::"):
                options.append(lines[j])
                j += 1
            folded = any(o.startswith(":class:") and "dropdown" in o for o in options)
            skipped = name in SKIPPED or (folded and not collapsed)
            stack.append((fence, skipped or any(s for _, s in stack)))
            i = j
            continue
        if stack and line.strip() == stack[-1][0]:
            stack.pop()
        elif not (gated or stack and stack[-1][1]):
            kept.append(line)
        i += 1
    return "\n".join(kept)


def count(path: Path, collapsed: bool = False) -> int:
    return len(CJK.findall(main_text(path.read_text(encoding="utf-8"), collapsed)))


def count_at(rev: str, path: Path, collapsed: bool = False) -> int | None:
    shown = subprocess.run(["git", "show", f"{rev}:{path.relative_to(ROOT).as_posix()}"], cwd=ROOT,
                           capture_output=True, text=True)
    return len(CJK.findall(main_text(shown.stdout, collapsed))) if shown.returncode == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=None, help="fail when a chapter (appendices exempt) exceeds it")
    parser.add_argument("--rev", default=None, help="also count the chapters at this git revision (before)")
    parser.add_argument("--collapsed", action="store_true", help="count collapsed blocks too (solutions excluded)")
    args = parser.parse_args()
    paths = sorted((ROOT / "chapters").glob("*.md"))
    rows = [(p.stem, count(p, args.collapsed)) for p in paths]
    if args.rev:
        print(f"| chapter | at {args.rev} | now |\n| --- | ---: | ---: |")
        for p, (name, n) in zip(paths, rows):
            before = count_at(args.rev, p, args.collapsed)
            print(f"| {name} | {'—' if before is None else f'{before:,}'} | {n:,} |")
    else:
        print("| chapter | CJK characters in the main text |\n| --- | ---: |")
        for name, n in rows:
            print(f"| {name} | {n:,} |")
    over = [name for name, n in rows if args.max and name not in EXEMPT and n > args.max]
    if over:
        print(f"over {args.max}: {', '.join(over)}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

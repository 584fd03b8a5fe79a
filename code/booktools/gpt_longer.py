"""How long must the GPT chapter's model train to pass the Kneser–Ney n-grams? (issue #17; not part of the build)

Runs the chapter's own cells, in one IPython shell, up to and including its training cell, with ``STEPS`` and
``SEGMENTS`` replaced (a checkpoint every ``--every`` steps; the learning-rate schedule stretches with STEPS),
then prints each checkpoint's perplexity on the chapter's validation slice next to the n-grams' on the same
positions. Usage: ``.venv/bin/python code/booktools/gpt_longer.py --steps 8000 --every 500`` (about 10 min of
one thread on the project's machine).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re

import jupytext
from IPython.core.interactiveshell import InteractiveShell

from notebooks import ROOT

STEPS_LINE = re.compile(r"^STEPS, SEGMENTS, BATCH, PEAK_LR = \d+, \d+,", re.M)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--every", type=int, default=500)
    args = parser.parse_args()
    if args.steps < 1 or args.every < 1 or args.steps % args.every:
        parser.error(f"--steps ({args.steps}) must be a positive multiple of --every ({args.every})")
    cells = [c.source for c in jupytext.read(ROOT / "chapters" / "gpt.md").cells if c.cell_type == "code"]
    last = next((i for i, src in enumerate(cells) if STEPS_LINE.search(src)), None)
    if last is None:
        raise SystemExit("chapters/gpt.md has no 'STEPS, SEGMENTS, BATCH, PEAK_LR = ...' line to lengthen")
    cells[last] = STEPS_LINE.sub(f"STEPS, SEGMENTS, BATCH, PEAK_LR = {args.steps}, {args.steps // args.every},",
                                 cells[last])
    os.chdir(ROOT / "chapters")
    shell = InteractiveShell.instance()
    for source in cells[:last + 1]:
        with contextlib.redirect_stdout(io.StringIO()):              # the chapter's own printing
            result = shell.run_cell(source)
        result.raise_error()
    ns = shell.user_ns
    probe_ngrams = {n: ns["math"].exp(ns["ngram_nll"](lm, ns["probe"])) for n, lm in ns["ngrams"].items()}
    print("n-grams on the validation slice: " + ", ".join(f"{n}-gram {p:.1f}" for n, p in probe_ngrams.items()))
    print(f"training: {ns['seconds']:.0f} s on one thread")
    for c in ns["checkpoints"]:
        print(f"step {c['step']:6}  validation-slice perplexity {c['val_ppl']:7.1f}")


if __name__ == "__main__":
    main()

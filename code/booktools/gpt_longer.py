"""The GPT chapter's training, lengthened or changed: where does its model pass the n-grams? (not in the build)

Runs the chapter's own cells, in one IPython shell, up to and including its training cell, with ``STEPS`` and
``SEGMENTS`` replaced (a checkpoint every ``--every`` steps; the learning-rate schedule stretches with STEPS),
and optionally ``BATCH`` and ``MIN_COUNT`` (the character table's); the hidden check cells are skipped (they hold
for the chapter's own settings). Prints each checkpoint's perplexity on the chapter's validation slice next to
the n-grams' on the same positions, then the model's on a training slice as long as the validation set (a gap
between the two shows overfitting) and the whole validation set's. Usage:
``.venv/bin/python code/booktools/gpt_longer.py --steps 6900 --every 690`` (ten times the chapter's training,
about 13 min of one thread on the project's machine).
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

STEPS_LINE = re.compile(r"^STEPS, SEGMENTS, BATCH, PEAK_LR = (\d+), (\d+), (\d+),", re.M)
MIN_COUNT = re.compile(r"^MIN_COUNT = \d+", re.M)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--batch", type=int, help="windows per step (default: the chapter's)")
    parser.add_argument("--min-count", type=int, help="the character table's min_count (default: the chapter's)")
    args = parser.parse_args()
    if args.steps < 1 or args.every < 1 or args.steps % args.every:
        parser.error(f"--steps ({args.steps}) must be a positive multiple of --every ({args.every})")
    for name in ("batch", "min_count"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    cells = [c.source for c in jupytext.read(ROOT / "chapters" / "gpt.md").cells
             if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", [])]
    last = next((i for i, src in enumerate(cells) if STEPS_LINE.search(src)), None)
    if last is None or not any(MIN_COUNT.search(src) for src in cells):
        raise SystemExit("chapters/gpt.md lacks the 'STEPS, SEGMENTS, BATCH, PEAK_LR = ...' or 'MIN_COUNT = ...' line")
    cells[last] = STEPS_LINE.sub(lambda m: f"STEPS, SEGMENTS, BATCH, PEAK_LR = {args.steps}, "
                                           f"{args.steps // args.every}, {args.batch or m.group(3)},", cells[last])
    if args.min_count is not None:
        cells = [MIN_COUNT.sub(f"MIN_COUNT = {args.min_count}", src) for src in cells]
    os.chdir(ROOT / "chapters")
    shell = InteractiveShell.instance()
    for source in cells[:last + 1]:
        with contextlib.redirect_stdout(io.StringIO()):              # the chapter's own printing
            result = shell.run_cell(source)
        result.raise_error()
    ns = shell.user_ns
    probe_ngrams = {n: ns["math"].exp(ns["ngram_nll"](lm, ns["probe"])) for n, lm in ns["ngrams"].items()}
    print("n-grams on the validation slice: " + ", ".join(f"{n}-gram {p:.1f}" for n, p in probe_ngrams.items()))
    print(f"training: {ns['STEPS']} steps of {ns['BATCH']} windows")
    for c in ns["checkpoints"]:
        print(f"step {c['step']:6}  validation-slice perplexity {c['val_ppl']:7.1f}")
    val = ns["streams"]["val"]
    train_slice = ns["streams"]["train"][:len(val)]            # as many training characters: overfitting shows here
    print(f"training slice ({len(train_slice):,} characters): model {ns['math'].exp(ns['model_nll'](ns['model'], train_slice)):.1f}")
    print(f"whole validation set: model {ns['math'].exp(ns['model_nll'](ns['model'], val)):.1f}, "
          f"2-gram {ns['math'].exp(ns['ngram_nll'](ns['ngrams'][2], val)):.1f}; character table {len(ns['vocab']):,}, "
          f"<unk> {100 * ns['unk_share']['val']:.2f} % of the validation characters")


if __name__ == "__main__":
    main()

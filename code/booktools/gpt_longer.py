"""The GPT chapter's full model trained longer or otherwise changed: where does it pass the n-grams? (not in the build)

Runs the chapter's own visible cells, in one IPython shell, up to the stage cell (data, baselines, ``train``, the
model classes), then trains only the full model with the stage cell's settings, ``STEPS`` replaced (the
learning-rate schedule stretches with it), and optionally ``BATCH`` and ``MIN_COUNT`` (the character table's).
Prints the model's perplexity on the chapter's validation slice next to the n-grams' on the same positions, on a
training slice as long as the validation set (a gap between the two shows overfitting) and on the whole
validation set. Usage: ``.venv/bin/python code/booktools/gpt_longer.py --steps 2000``.
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

SETTINGS = re.compile(r"^STEPS, BATCH, LR = (\d+), (\d+), ([\d.e-]+)$", re.M)
MIN_COUNT = re.compile(r"^MIN_COUNT = \d+", re.M)
FULL_MODEL = "LM([Block(HEADS, D_FF) for _ in range(N_LAYERS)])"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, help="windows per step (default: the chapter's)")
    parser.add_argument("--min-count", type=int, help="the character table's min_count (default: the chapter's)")
    args = parser.parse_args()
    for name in ("steps", "batch", "min_count"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    cells = [c.source for c in jupytext.read(ROOT / "chapters" / "gpt.md").cells
             if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", [])]
    stage = next((i for i, src in enumerate(cells) if SETTINGS.search(src)), None)
    if stage is None or not any(MIN_COUNT.search(src) for src in cells):
        raise SystemExit("chapters/gpt.md lacks the 'STEPS, BATCH, LR = ...' or 'MIN_COUNT = ...' line")
    if args.min_count is not None:
        cells = [MIN_COUNT.sub(f"MIN_COUNT = {args.min_count}", src) for src in cells]
    settings = "\n".join(line for line in cells[stage].splitlines() if re.match(r"^(D_FF|STEPS), ", line))
    settings = SETTINGS.sub(lambda m: f"STEPS, BATCH, LR = {args.steps}, {args.batch or m.group(2)}, {m.group(3)}",
                            settings)
    run = (f"{settings}\ntorch.manual_seed(attnbook.seed(1))\ngpt = {FULL_MODEL}\ntrain(gpt, STEPS, LR, BATCH)\n"
           "probe = streams['val'][:CTX * 200 + 1]\n")
    os.chdir(ROOT / "chapters")
    shell = InteractiveShell.instance()
    for source in cells[:stage] + [run]:
        with contextlib.redirect_stdout(io.StringIO()):              # the chapter's own printing
            result = shell.run_cell(source)
        result.raise_error()
    ns = shell.user_ns
    exp, nll = ns["math"].exp, lambda stream: float(ns["nll_by_position"](ns["gpt"], stream).mean())
    probe_ngrams = {n: exp(ns["ngram_nll"](lm, ns["probe"])) for n, lm in ns["ngrams"].items()}
    print("n-grams on the validation slice: " + ", ".join(f"{n}-gram {p:.1f}" for n, p in probe_ngrams.items()))
    print(f"training: {ns['STEPS']} steps of {ns['BATCH']} windows")
    print(f"validation slice: model {exp(nll(ns['probe'])):.1f}")
    val = ns["streams"]["val"]
    train_slice = ns["streams"]["train"][:len(val)]            # as many training characters: overfitting shows here
    print(f"training slice ({len(train_slice):,} characters): model {exp(nll(train_slice)):.1f}")
    print(f"whole validation set: model {exp(nll(val)):.1f}, "
          f"2-gram {exp(ns['ngram_nll'](ns['ngrams'][2], val)):.1f}; character table {len(ns['vocab']):,}, "
          f"<unk> {100 * ns['unk_share']['val']:.2f} % of the validation characters")


if __name__ == "__main__":
    main()

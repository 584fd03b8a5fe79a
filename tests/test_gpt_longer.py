"""code/booktools/gpt_longer.py (issue #17's lengthened run) still finds and runs the GPT chapter's training cell."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_lengthened_run_replaces_the_steps_and_reports_every_checkpoint():
    out = subprocess.run([sys.executable, str(ROOT / "code" / "booktools" / "gpt_longer.py"), "--steps", "20",
                          "--every", "10"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    ngrams = [float(v) for v in re.findall(r"\d-gram ([\d.]+)", out)]
    steps = [int(s) for s in re.findall(r"step +(\d+)", out)]
    assert len(ngrams) == 3 and ngrams[0] > ngrams[1] > ngrams[2] and steps == [0, 10, 20]

"""code/booktools/gpt_longer.py (issue #17's lengthened run) still finds the GPT chapter's cells and trains its full model."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_lengthened_run_replaces_the_settings_and_reports_the_model():
    out = subprocess.run([sys.executable, str(ROOT / "code" / "booktools" / "gpt_longer.py"), "--steps", "20",
                          "--batch", "4", "--min-count", "50"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    ngrams = [float(v) for v in re.findall(r"\d-gram ([\d.]+)", out)]
    assert "20 steps of 4 windows" in out and len(ngrams) == 4 and ngrams[0] > ngrams[1] > ngrams[2]
    assert float(re.search(r"validation slice: model ([\d.]+)", out).group(1)) > ngrams[1]   # 20 steps: above the bigram
    assert float(re.search(r"training slice \([\d,]+ characters\): model ([\d.]+)", out).group(1)) > 1
    unk = float(re.search(r"<unk> ([\d.]+) %", out).group(1))
    assert unk > 1.3        # min_count=50 took effect: the chapter's own table (min_count=20) leaves 0.7–0.9 % <unk>

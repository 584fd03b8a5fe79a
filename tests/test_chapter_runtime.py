"""The chapter runtime: shiftable seeds, glue with and without the book build, and claim checks."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import attnbook


def test_seed_adds_the_shift_from_the_environment(monkeypatch):
    monkeypatch.delenv("ATTNBOOK_SEED_SHIFT", raising=False)
    assert attnbook.seed(5) == 5
    monkeypatch.setenv("ATTNBOOK_SEED_SHIFT", "3")
    assert attnbook.seed(5) == 8 and attnbook.seed(np.int64(0)) == 3
    # a shifted generator draws what torch draws from the shifted seed
    expected = torch.randn(4, generator=torch.Generator().manual_seed(8))
    assert torch.equal(torch.randn(4, generator=attnbook.generator(5)), expected)


@pytest.mark.parametrize("bad", ["-1", "one", "1.5"])
def test_bad_seed_shift_is_a_clear_error(monkeypatch, bad):
    monkeypatch.setenv("ATTNBOOK_SEED_SHIFT", bad)
    with pytest.raises(ValueError, match="ATTNBOOK_SEED_SHIFT"):
        attnbook.seed(0)


@pytest.mark.parametrize("bad", [-1, 1.0, True, "0"])
def test_bad_seed_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="non-negative integer"):
        attnbook.seed(bad)


def test_start_chapter_seeds_with_the_shift(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_SEED_SHIFT", "2")
    attnbook.start_chapter()
    drawn = torch.rand(3)
    torch.manual_seed(2)
    assert torch.equal(drawn, torch.rand(3))
    assert attnbook.provenance().seed_shift == 2 and "种子偏移 2" in str(attnbook.provenance())


def test_check_returns_the_value_inside_the_range():
    assert attnbook.check("x 在范围内", 0.5, 0.0, 1.0) == 0.5
    assert attnbook.check("张量也可以", torch.tensor(2.0), low=1) == torch.tensor(2.0)
    assert attnbook.check("相等", 3, expect=3) == 3


@pytest.mark.parametrize("value, kwargs, expected", [
    (0.97, {"low": 0.98}, "> 0.98"),
    (2.0, {"high": 1.0}, "< 1"),
    (float("nan"), {"low": 0.0, "high": 1.0}, "> 0 且 < 1"),
    (1.0, {"low": 1.0}, "> 1"),                     # bounds are strict
])
def test_check_names_claim_range_and_measured_value_in_chinese(value, kwargs, expected):
    with pytest.raises(attnbook.ClaimError) as info:
        attnbook.check("注意力模型的准确率高于基线", value, **kwargs)
    message = str(info.value)
    assert "注意力模型的准确率高于基线" in message and f"期望：{expected}" in message
    assert f"本次测得：{value:.6g}" in message and "随机种子偏移" in message
    assert isinstance(info.value, AssertionError)   # the build fails on it like on any assert


def test_check_expect_and_bad_arguments():
    with pytest.raises(attnbook.ClaimError, match="等于 0"):
        attnbook.check("没有输出改变", 2, expect=0)
    with pytest.raises(ValueError, match="low, high or expect"):
        attnbook.check("无界", 1.0)
    with pytest.raises(ValueError, match="not both"):
        attnbook.check("两者", 1.0, low=0, expect=1)
    with pytest.raises(ValueError, match="real number"):
        attnbook.check("字符串", "0.5", low=0)


@pytest.mark.parametrize("strict", [{"ATTNBOOK_GLUE": "1"}, {"ATTNBOOK_STRICT_TIMING": "1"}])
def test_a_failing_timing_claim_raises_in_the_build_and_in_robustness(monkeypatch, strict):
    for name in ("ATTNBOOK_GLUE", "ATTNBOOK_STRICT_TIMING"):
        monkeypatch.delenv(name, raising=False)
    for name, value in strict.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(attnbook.ClaimError, match="缓存更快"):
        attnbook.check("缓存更快", 0.99, 1.0, timing=True)


def test_a_failing_timing_claim_only_warns_in_a_readers_notebook(monkeypatch):
    for name in ("ATTNBOOK_GLUE", "ATTNBOOK_STRICT_TIMING"):
        monkeypatch.delenv(name, raising=False)
    with pytest.warns(attnbook.TimingWarning) as caught:
        assert attnbook.check("缓存更快", 0.99, 1.0, timing=True) == 0.99
    message = str(caught[0].message)
    assert "缓存更快" in message and "期望：> 1" in message and "本次测得：0.99" in message and "继续运行" in message
    # A value claim still stops the reader's notebook, and a timing claim that holds says nothing.
    with pytest.raises(attnbook.ClaimError):
        attnbook.check("准确率高于基线", 0.5, 0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attnbook.check("缓存更快", 1.5, 1.0, timing=True)


GLUE_SCRIPT = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.displaypub import DisplayPublisher
import attnbook
shown = []
class Capture(DisplayPublisher):
    def publish(self, data, metadata=None, **kwargs):
        shown.append({"data": data, "metadata": metadata})
shell = InteractiveShell.instance()
shell.display_pub = Capture()
attnbook.glue("acc", 0.25)
attnbook.glue("acc_shown", 0.5, display=True)
import numpy, torch
attnbook.glue("np_scalar", numpy.float64(0.75))
attnbook.glue("tensor_scalar", torch.tensor(3))
print(json.dumps(shown))
"""


def _glue_outputs(env):
    done = subprocess.run([sys.executable, "-c", GLUE_SCRIPT], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_glue_emits_myst_nb_bundle_in_the_build_and_nothing_for_a_reader(monkeypatch):
    import os

    from myst_nb.ext.glue import GLUE_PREFIX   # the build's own reader of the bundle

    base = {k: v for k, v in os.environ.items() if k != "ATTNBOOK_GLUE"}
    built = _glue_outputs({**base, "ATTNBOOK_GLUE": "1"})
    assert built[0]["data"] == {GLUE_PREFIX + "text/plain": "0.25"}
    assert built[0]["metadata"]["scrapbook"] == {"name": "acc", "mime_prefix": GLUE_PREFIX}
    assert built[1]["data"] == {"text/plain": "0.5"} and built[1]["metadata"]["scrapbook"]["mime_prefix"] == ""
    # numpy and 0-d tensor scalars are glued as plain numbers ({glue:text}`x:.2f` parses the text/plain)
    assert built[2]["data"] == {GLUE_PREFIX + "text/plain": "0.75"}
    assert built[3]["data"] == {GLUE_PREFIX + "text/plain": "3"}
    reader = _glue_outputs(base)
    assert reader == [{"data": {"text/plain": "0.5"}, "metadata": {}}]   # display=False shows nothing

"""The teacher command against students' files that attack it (issue 49 item 3, cold read 2026-11-29 §3):
each file runs in its own interpreter, only its outputs come back, the teacher's process compares."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = ROOT / "tests" / "exercise_mistakes" / "attacks"
DATA = ROOT / "tests" / "exercise_mistakes"


def _teacher(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "code"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "attnbook.exercises", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def _copy(tmp_path, *names):
    for n in names:
        shutil.copy(ATTACKS / n, tmp_path / n)
    return names


def _report(tmp_path, *names, extra=()):
    out = _teacher(*names, "--json", "r.json", *extra, cwd=tmp_path)
    return out, {Path(r["file"]).name: r for r in json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))}


def test_os_exit_at_top_level_is_a_failure_not_a_silent_pass(tmp_path):
    _copy(tmp_path, "exit_early.py", "victim_sinusoidal.py")
    out, reports = _report(tmp_path, "exit_early.py", "victim_sinusoidal.py")
    assert out.returncode == 1, out.stdout
    assert "无法导入" in reports["exit_early.py"]["error"]
    assert reports["victim_sinusoidal.py"]["results"][0]["passed"]          # the next file is still graded


def test_os_exit_inside_a_function_fails_that_function_only(tmp_path):
    _copy(tmp_path, "exit_in_function.py")
    out, reports = _report(tmp_path, "exit_in_function.py")
    rows = {r["name"]: r for r in reports["exit_in_function.py"]["results"]}
    assert out.returncode == 1
    assert not rows["causal_mask"]["passed"] and rows["causal_mask"]["mistake"] == "crash"
    assert rows["stable_softmax"]["passed"], rows


def test_patching_the_checker_and_printing_a_fake_table_do_not_pass(tmp_path):
    _copy(tmp_path, "patch_checker.py")
    out, reports = _report(tmp_path, "patch_checker.py")
    (row,) = reports["patch_checker.py"]["results"]
    assert out.returncode == 1 and not row["passed"] and row["mistake"] == "naive", row
    assert "通过：全部一致" not in out.stdout                              # its prints never reach the teacher


def test_torch_defaults_changed_by_one_file_do_not_reach_the_next(tmp_path):
    _copy(tmp_path, "set_default_dtype.py", "victim_sinusoidal.py")
    out, reports = _report(tmp_path, "set_default_dtype.py", "victim_sinusoidal.py")
    assert out.returncode == 0, out.stdout
    assert reports["victim_sinusoidal.py"]["results"][0]["passed"]
    out2, alone = _report(tmp_path, "victim_sinusoidal.py")
    assert alone["victim_sinusoidal.py"]["results"] == reports["victim_sinusoidal.py"]["results"]


def test_a_file_over_the_memory_limit_fails(tmp_path):
    _copy(tmp_path, "hog_memory.py")
    out, reports = _report(tmp_path, "hog_memory.py", extra=("--memory", "3000"))
    (row,) = reports["hog_memory.py"]["results"]
    assert out.returncode == 1 and not row["passed"], row


def test_seed_draws_other_cases_and_keeps_the_verdicts(tmp_path):
    shutil.copy(DATA / "student_mixed.py", tmp_path / "s.py")
    out0, r0 = _report(tmp_path, "s.py", extra=("--timeout", "3"))
    out1, r1 = _report(tmp_path, "s.py", extra=("--timeout", "3", "--seed", "7"))
    v0 = {r["name"]: r["passed"] for r in r0["s.py"]["results"]}
    v1 = {r["name"]: r["passed"] for r in r1["s.py"]["results"]}
    assert v0 == v1 and out0.returncode == out1.returncode == 1
    assert r0["s.py"]["passed"] == 2 and r0["s.py"]["total"] == 6


def test_ten_files_of_ten_functions(tmp_path):
    """The issue's budget: 10 files x 10 functions in under 60 s on 2 cores (CPU time: the machine is shared)."""
    src = (DATA / "correct.py").read_text(encoding="utf-8")
    files = []
    for i in range(10):
        (tmp_path / f"s{i}.py").write_text(src, encoding="utf-8")
        files.append(f"s{i}.py")
    before = os.times()
    start = time.perf_counter()
    out = _teacher(*files, "--timeout", "10", cwd=tmp_path)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    assert out.returncode == 0, out.stdout[-2000:]
    print(f"10 files: {cpu:.1f} s CPU, {wall:.1f} s wall")
    assert cpu < 2 * 60, cpu            # 2 cores x 60 s


def test_forged_frames_fail_this_file_and_not_the_next(tmp_path):
    _copy(tmp_path, "forge_frames.py", "victim_sinusoidal.py")
    out, reports = _report(tmp_path, "forge_frames.py", "victim_sinusoidal.py")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    forged = reports["forge_frames.py"]
    assert forged["error"] or not any(r["passed"] for r in forged["results"]), forged
    assert reports["victim_sinusoidal.py"]["results"][0]["passed"]

"""attnbook.exercises: the API, every checker against the package, independent solutions and typical mistakes,
the time limit, and the teacher command."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import attnbook
from attnbook import exercises
from attnbook.exercises import _watch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "exercise_mistakes"


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_exercise_data_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CORRECT = _load(DATA / "correct.py")
WRONG = _load(DATA / "wrong.py")
WRONG_FUNCTIONS = sorted(n for n in vars(WRONG) if "__" in n and not n.startswith("_"))

# The issue's ten exercises and their parameters (a reader's code and a grader's scripts rely on them).
ISSUE_SIGNATURES = {
    "stable_softmax": ("z", "dim=-1"),
    "masked_softmax": ("scores", "mask"),
    "causal_mask": ("n",),
    "scaled_dot_product_attention": ("q", "k", "v", "mask=None"),
    "sinusoidal_encoding": ("num_positions", "d_model"),
    "apply_rotary": ("x", "positions"),
    "multihead_attention": ("x", "w_q", "w_k", "w_v", "w_o", "num_heads"),
    "online_softmax": ("x", "block_size"),
    "top_p_filter": ("logits", "p"),
    "linear_attention_recurrent": ("q", "k", "v"),
}

# The package's own implementation of each exercise, adapted to the exercise's signature.
OWN = {
    "lstm_cell": lambda x, h, c, w_ih, w_hh, b_ih, b_hh: attnbook.lstm_step(x @ w_ih.T + b_ih, h, c, w_hh, b_hh),
    "additive_score": attnbook.additive_score,
    "kernel_regression": lambda qs, ks, vs, w: attnbook.attend(
        qs.view(1, -1, 1), ks.view(1, -1, 1), vs.view(1, -1, 1),
        lambda q, k: -(q - k.transpose(-2, -1)) ** 2 / (2 * w ** 2))[0].view(-1),
    "stable_softmax": attnbook.softmax,
    "masked_softmax": attnbook.masked_softmax,
    "causal_mask": attnbook.causal_mask,
    "scaled_dot_product_attention": lambda q, k, v, mask=None: attnbook.scaled_dot_product_attention(q, k, v, mask)[0],
    "sinusoidal_encoding": attnbook.sinusoidal_encoding,
    "apply_rotary": attnbook.apply_rotary,
    "skipgram_pairs": CORRECT.skipgram_pairs,      # the package's pairs use word2vec's random windows
    "cosine_nearest": lambda q, vs, k: attnbook.cosine_similarity(q[None], vs)[0].topk(k).indices,
    "split_heads": attnbook.split_heads,
    "multihead_attention": CORRECT.multihead_attention,
    "masked_mean": attnbook.masked_mean,
    "layer_norm": CORRECT.layer_norm,
    "label_smoothed_cross_entropy": attnbook.label_smoothed_cross_entropy,
    "kv_cache_step": CORRECT.kv_cache_step,
    "next_token_loss": lambda lg, y: attnbook.cross_entropy(lg[:, :-1], y[:, 1:]),
    "top_p_filter": attnbook.top_p_filter,
    "repeat_kv": attnbook.repeat_kv,
    "online_softmax": attnbook.online_softmax,
    "sliding_window_mask": attnbook.sliding_window_mask,
    "linear_attention_recurrent": lambda q, k, v: attnbook.linear_attention_recurrent(q, k, v)[0],
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_names_info_and_chapters():
    names = exercises.names()
    assert len(names) == len(set(names)) >= 23
    assert set(ISSUE_SIGNATURES) <= set(OWN) <= set(names)
    order = list(exercises.CHAPTERS)
    chapters = [exercises.info(n).chapter for n in names]
    assert chapters == sorted(chapters, key=order.index), "names() is in book order"
    counts = {c: chapters.count(c) for c in order}
    assert all(counts[c] >= 1 for c in order), counts
    core = set(order) - {"sequence_models", "text_classification"}
    assert all(counts[c] >= 2 for c in core), counts
    for n in names:
        ex = exercises.info(n)
        assert ex.signature.startswith(f"{n}(") and ex.covers and ex.section
        assert ex.where.startswith(f"《{exercises.CHAPTERS[ex.chapter]}》§")


@pytest.mark.parametrize("name", sorted(ISSUE_SIGNATURES))
def test_issue_signatures(name):
    params = exercises.info(name).signature.split("(", 1)[1].split(")", 1)[0]
    assert tuple(p.strip() for p in params.split(",")) == ISSUE_SIGNATURES[name]
    solution = inspect.signature(getattr(CORRECT, name))
    assert tuple(solution.parameters) == tuple(p.split("=")[0] for p in ISSUE_SIGNATURES[name])


def test_sections_exist_in_the_chapters():
    """Every "见《…》§…" a checker can print names a real section of that chapter."""
    titles = {v: k for k, v in exercises.CHAPTERS.items()}
    sources = {c: (ROOT / "chapters" / f"{c}.md").read_text(encoding="utf-8").replace("$\\sqrt{d_k}$", "√d_k")
               for c in exercises.CHAPTERS}          # the messages are plain text: √d_k for $\sqrt{d_k}$
    wheres = {exercises.info(n).where for n in OWN}
    for module in ("core", "basics", "positions", "words", "heads", "models", "efficient"):
        text = Path(importlib.import_module(f"attnbook.exercises.{module}").__file__).read_text(encoding="utf-8")
        wheres |= {w for w in __import__("re").findall(r"《[^》]+》§[^\"]+", text)}
    for where in wheres:
        title, section = where[1:].split("》§")
        assert title in titles, where
        assert f"# {section}\n" in sources[titles[title]], where


def test_unknown_name_raises():
    with pytest.raises(ValueError, match="nope.*masked_softmax"):
        exercises.check("nope", lambda x: x)
    with pytest.raises(ValueError, match="known exercises"):
        exercises.info("Softmax")


@pytest.mark.parametrize("name", sorted(OWN))
def test_the_package_passes_its_own_checker(name, monkeypatch):
    monkeypatch.setattr(_watch, "ENABLED", False)    # the exercise forbids calling the package's own function
    result = exercises.check(name, OWN[name])
    assert result.passed, result.message
    assert result.message.startswith("通过") and result.mistake is None
    covers = exercises.info(name).covers          # the appendix's table lists them: each case run, counted once
    assert result.message == f"通过：{len(covers)} 个情形都与本书的实现一致（{'；'.join(covers)}）。", result.message


@pytest.mark.parametrize("name", sorted(OWN))
def test_an_independent_solution_passes_in_about_a_second(name):
    exercises.check("causal_mask", CORRECT.causal_mask)          # torch's lazy imports are paid once
    start = time.perf_counter()
    result = exercises.check(name, getattr(CORRECT, name))
    elapsed = time.perf_counter() - start
    assert result.passed, result.message
    assert elapsed < 3.0, f"{name}: {elapsed:.2f} s"             # ~0.05 s here; margin for a busy machine


def test_at_least_three_typical_mistakes_per_exercise():
    for name in OWN:                                   # the serving chapter's checkers have their own tests
        assert sum(f.split("__")[0] == name for f in WRONG_FUNCTIONS) >= 3, name


@pytest.mark.parametrize("fname", WRONG_FUNCTIONS)
def test_typical_mistake_is_named(fname):
    name, key = fname.split("__")
    result = exercises.check(name, getattr(WRONG, fname))
    assert not result.passed
    assert result.mistake == key, result.message
    first, *rest = result.message.splitlines()
    assert first.startswith("未通过（情形：") and "看起来像是" in first
    assert any(line.strip().startswith("输入：") for line in rest)
    assert any(line.strip().startswith("期望：") for line in rest) and any(line.strip().startswith("得到：") for line in rest)
    assert rest[-1].strip().startswith("见《") and rest[-1].endswith("。")


def _stub(z, dim=-1):
    raise NotImplementedError


def _raises(z, dim=-1):
    return z.softmax(dim) + torch.zeros(7)


def _wrong_shape(z, dim=-1):
    return torch.softmax(z, dim).flatten()


def _wrong_dtype(z, dim=-1):
    return torch.softmax(z.double(), dim)


def _returns_none(z, dim=-1):
    torch.softmax(z, dim)


def _loops(z, dim=-1):
    while True:
        pass


def _long_c_call(z, dim=-1):
    a = torch.randn(3000, 3000)
    for _ in range(10 ** 6):
        a = a @ a
    return a


def _exits(z, dim=-1):
    sys.exit(3)


def _prints(z, dim=-1):
    print("调试输出")
    return CORRECT.stable_softmax(z, dim)


@pytest.mark.parametrize("fn, start, text", [
    (_stub, "还没有实现", "NotImplementedError"),
    (_raises, "未通过（情形：", "抛出了 RuntimeError"),
    (_wrong_shape, "未通过（情形：", "形状不对"),
    (_wrong_dtype, "未通过（情形：", "数据类型不对"),
    (_returns_none, "未通过（情形：", "应当返回 torch.Tensor"),
    (_exits, "未通过（情形：", "SystemExit"),
    ("not a function", "未通过", "应当是一个函数"),
])
def test_broken_functions_are_reported_not_raised(fn, start, text):
    result = exercises.check("stable_softmax", fn)
    assert not result.passed and result.message.startswith(start) and text in result.message, result.message
    assert "✗" in repr(result) and "✗" in result._repr_html_()


def test_printing_passes_and_nothing_leaks(capfd):
    result = exercises.check("stable_softmax", _prints)
    assert result.passed and "✓" in repr(result)
    assert "调试输出" not in capfd.readouterr().out


@pytest.mark.parametrize("fn", [_loops, _long_c_call])
def test_time_limit(fn):
    start = time.perf_counter()
    result = exercises.check("stable_softmax", fn, timeout=1.0)
    assert time.perf_counter() - start < 3.0
    assert not result.passed and result.mistake == "timeout"
    assert "1 秒内没有算完" in result.message and "一行小分数" in result.message


def test_time_limit_without_fork(monkeypatch):
    """Where fork is missing the check runs in this process, stopped by a timer signal on the main thread."""
    monkeypatch.setenv("ATTNBOOK_EXERCISES_NOFORK", "1")
    start = time.perf_counter()
    result = exercises.check("stable_softmax", _loops, timeout=1.0)
    assert time.perf_counter() - start < 3.0 and result.mistake == "timeout", result.message
    assert exercises.check("stable_softmax", CORRECT.stable_softmax).passed
    assert exercises.check("masked_softmax", WRONG.masked_softmax__fill_inf).mistake == "fill_inf"


def _perturb(x):
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bool:
            return ~x
        if not x.is_floating_point():
            return x.flip(-1) + 1
        return torch.where(torch.isfinite(x), x + 0.1, x).to(x.dtype) if x.numel() else x
    if isinstance(x, tuple):
        return (_perturb(x[0]),) + x[1:]
    if isinstance(x, list):
        return x + [("多", "余")]
    return x


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_checker_fails_on_a_deliberately_broken_reference(name, monkeypatch):
    """Break the reference a checker compares with: the correct solution must then fail."""
    _, checker = exercises._REGISTRY[name]
    module = importlib.import_module(checker.__module__)
    real = module.run_cases

    def broken(fn, reference, *args, **kwargs):
        return real(fn, lambda *a, **k: _perturb(reference(*a, **k)), *args, **kwargs)

    monkeypatch.setattr(module, "run_cases", broken)
    result = exercises.check(name, getattr(CORRECT, name))
    assert not result.passed, name


def _teacher(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "code"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "attnbook.exercises", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd or ROOT, timeout=120)


def test_teacher_command_on_a_mixed_file(tmp_path):
    student = tmp_path / "student.py"
    student.write_text((DATA / "student_mixed.py").read_text(encoding="utf-8"), encoding="utf-8")
    out = _teacher(student, "--timeout", "2", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.split() and line.split()[0] in exercises.names()}
    assert set(rows) == {"stable_softmax", "masked_softmax", "causal_mask", "scaled_dot_product_attention",
                         "repeat_kv", "online_softmax"}
    assert rows["stable_softmax"].split()[1] == "通过" and rows["causal_mask"].split()[1] == "通过"
    assert rows["masked_softmax"].split()[1] == "未通过" and "-1e9" in rows["masked_softmax"]
    assert "还没有实现" in rows["scaled_dot_product_attention"]
    assert "抛出了" in rows["repeat_kv"] and "没有算完" in rows["online_softmax"]
    assert "helper" not in out.stdout and "共 6 个练习，通过 2 个" in out.stdout


def test_teacher_command_all_right_and_nothing_found(tmp_path):
    assert _teacher(DATA / "correct.py").returncode == 0
    empty = tmp_path / "empty.py"
    empty.write_text("def helper():\n    return 1\n", encoding="utf-8")
    out = _teacher(empty)
    assert out.returncode == 1 and "没有找到练习函数" in out.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n", encoding="utf-8")
    out = _teacher(broken)
    assert out.returncode == 1 and "无法导入" in out.stdout
    listing = _teacher("--list")
    assert listing.returncode == 0 and "masked_softmax(scores, mask) -> Tensor" in listing.stdout


def test_register_a_new_exercise():
    ex = exercises.Exercise("_demo_double", "_demo_double(x) -> Tensor", "softmax", ("一个向量",), "定义与基本性质")

    def checker(fn):
        cases = [exercises.Case("一个向量", (torch.tensor([1.0, 2.0]),))]
        mistakes = [exercises.Mistake("plus", "加了而不是乘了", lambda x: x + 2)]
        return exercises.run_cases(fn, lambda x: 2 * x, cases, mistakes, ex.where, ("x",))

    exercises.register(ex, checker)
    try:
        assert exercises.check("_demo_double", lambda x: x * 2).passed
        assert exercises.check("_demo_double", lambda x: x + 2).mistake == "plus"
        with pytest.raises(ValueError):
            exercises.register(ex, lambda fn: (True, ""))
    finally:
        exercises._REGISTRY.pop("_demo_double")


def test_teacher_command_stops_a_file_that_never_finishes_importing(tmp_path, monkeypatch, capsys):
    from attnbook.exercises import __main__ as teacher
    hang = tmp_path / "hang.py"
    hang.write_text("while True:\n    pass\n", encoding="utf-8")
    start = time.perf_counter()
    report = teacher.grade(hang, timeout=1.0, memory_mb=4096, import_limit=1.0)
    assert time.perf_counter() - start < 30.0 and "无法导入" in report["error"], report


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_with_cuda_in_use_the_check_runs_in_process():
    """A forked child cannot use CUDA; once the parent has used it, a solution that puts tensors on the GPU still
    passes, and an endless loop is still stopped."""
    torch.zeros(1, device="cuda")
    assert exercises.check("causal_mask", lambda n: torch.ones(n, n, dtype=torch.bool, device="cuda").tril()).passed
    assert exercises.check("stable_softmax", _loops, timeout=1.0).mistake == "timeout"


def test_a_child_that_hangs_before_the_first_case_falls_back_to_this_process(monkeypatch):
    """If the forked child hangs before it reaches the reader's function (e.g. a lock held at fork time), the check
    runs again in this process instead of blaming the reader."""
    from attnbook.exercises import _runner
    calls = []
    real = _runner._run_forked

    def hung_child(job, timeout):
        calls.append(timeout)
        return real(lambda: time.sleep(60), 0.5)          # a child that never reports a case

    monkeypatch.setattr(_runner, "_run_forked", hung_child)
    result = exercises.check("stable_softmax", CORRECT.stable_softmax, timeout=2.0)
    assert calls and result.passed, result.message


def test_top_p_crossing_not_named_as_ties():
    # cum <= p drops the crossing token (no tie in that case); the tie diagnosis once won by elimination
    result = exercises.check("top_p_filter", WRONG.top_p_cum_le_p)
    assert not result.passed and result.mistake == "drops_crossing", result.message

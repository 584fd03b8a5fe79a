"""The parallel pre-execution extension: chapters run side by side, once, and myst-nb finds them cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from conftest import ROOT

CELL = """\
import json, os, time
start = time.time()
time.sleep(1.5)
with open({log!r}, "a") as f:
    f.write(json.dumps({{"doc": {doc!r}, "start": start, "end": time.time(),
                         "omp": os.environ.get("OMP_NUM_THREADS")}}) + "\\n")
print("ran", {doc!r})
{extra}
"""


def _chapter(log: str, doc: str, extra: str = "", budget: int = 0) -> str:
    return ("---\nfile_format: mystnb\nkernelspec:\n  name: python3\n  display_name: Python 3\n"
            f"budget_seconds: {budget}\n---\n\n# {doc}\n\n```{{code-cell}} ipython3\n"
            + CELL.format(log=log, doc=doc, extra=extra) + "```\n")


def _build(tmp_path, docs: dict[str, str], extra_conf: str = "") -> subprocess.CompletedProcess:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(ROOT / "code" / "booktools")!r})
        extensions = ["myst_nb", "parallel_execution"]
        nb_execution_mode = "cache"
        nb_execution_cache_path = {str(tmp_path / "cache")!r}
        nb_execution_raise_on_error = True
        """) + extra_conf)
    (src / "index.md").write_text("# index\n\n```{toctree}\n" + "\n".join(docs) + "\n```\n")
    for name, text in docs.items():
        (src / f"{name}.md").write_text(text)
    return subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)


def _runs(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_each_chapter_runs_once_side_by_side_on_one_thread_and_is_served_from_the_cache(tmp_path):
    log = str(tmp_path / "runs.jsonl")
    result = _build(tmp_path, {"a": _chapter(log, "a", budget=10), "b": _chapter(log, "b", budget=20)})
    assert result.returncode == 0, result.stderr
    runs = _runs(tmp_path / "runs.jsonl")
    assert sorted(r["doc"] for r in runs) == ["a", "b"]          # myst-nb did not execute them again
    assert all(r["omp"] == "1" for r in runs)
    if (os.cpu_count() or 1) >= 2:
        a, b = sorted(runs, key=lambda r: r["doc"])
        assert a["start"] < b["end"] and b["start"] < a["end"]  # the two kernels overlapped
    page = (tmp_path / "out" / "a.html").read_text()
    assert "ran a" in page                                      # the cached output is on the page


def test_a_failing_chapter_is_not_cached_and_myst_nb_reports_it(tmp_path):
    log = str(tmp_path / "runs.jsonl")
    bad = _chapter(log, "bad", extra='raise ValueError("broken chapter")')
    result = _build(tmp_path, {"good": _chapter(log, "good"), "bad": bad})
    assert result.returncode != 0
    assert "bad.md: WARNING: Executing notebook failed" in result.stderr
    docs = sorted(r["doc"] for r in _runs(tmp_path / "runs.jsonl"))
    assert docs == ["bad", "bad", "good"]                     # the failure ran again under myst-nb


def test_notebooks_excluded_from_execution_are_left_alone(tmp_path):
    log = str(tmp_path / "runs.jsonl")
    result = _build(tmp_path, {"run": _chapter(log, "run"), "skip": _chapter(log, "skip")},
                    extra_conf='nb_execution_excludepatterns = ["skip.md"]\n')
    assert result.returncode == 0, result.stderr
    assert [r["doc"] for r in _runs(tmp_path / "runs.jsonl")] == ["run"]


def test_execute_all_runs_inside_a_running_event_loop():
    # pytest's session holds Playwright's loop when the reader-environment tests run (CI failed on exactly this).
    # The caller's loop runs in a thread of its own here, since this thread may already hold Playwright's.
    import asyncio
    import threading

    import nbformat
    sys.path.insert(0, str(ROOT / "code" / "booktools"))
    from run_notebooks import Run, execute_all

    run = Run("inside", nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]))
    failures = []

    async def caller():
        execute_all([run])

    def in_a_loop():
        try:
            asyncio.run(caller())
        except BaseException as exc:  # noqa: BLE001 - checked below
            failures.append(exc)

    thread = threading.Thread(target=in_a_loop)
    thread.start()
    thread.join()
    assert failures == [] and run.errors == [] and run.notebook.cells[0].outputs[0]["text"] == "42\n"

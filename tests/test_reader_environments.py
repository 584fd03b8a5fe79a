"""Every chapter where readers open it: a Colab-like and a Binder-like clean environment, from nothing.

- Colab: the generated notebooks (`make notebooks`) from an empty folder, in an env holding only what Colab
  preinstalls plus a wheel of the package. This run is also the robustness slice of `make test`: seeds shifted
  by 1 and torch's portable CPU kernels (`ATEN_CPU_CAPABILITY=default`), so every claim must hold on numbers
  other than the build's.
- Binder: the MyST chapters opened through jupytext, as Binder opens them, in an env made from `binder/`; at
  the build's seed and kernel its text outputs must equal the book's (reproducibility).
"""

from __future__ import annotations

import subprocess
import sys

import jupytext
import nbformat
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import notebooks  # noqa: E402
import reader_envs  # noqa: E402
from run_notebooks import Run, execute_all, text_outputs  # noqa: E402

CHAPTERS = notebooks.chapter_sources()
ENVS = ROOT / "_build" / "reader-envs"
ROBUSTNESS_SLICE = {"ATTNBOOK_SEED_SHIFT": "1", "ATEN_CPU_CAPABILITY": "default"}

pytestmark = pytest.mark.slow


def _run_in(env_dir, kernel, runs):
    for run in runs:
        run.kernel_name = kernel
    with reader_envs.kernels_of(env_dir):
        execute_all(runs)
    return {run.name: run for run in runs}


@pytest.fixture(scope="module")
def colab_runs():
    generated = [ROOT / "_build" / "notebooks" / c.relative_to(ROOT).with_suffix(".ipynb") for c in CHAPTERS]
    missing = [p for p in generated if not p.exists()]
    if missing:
        pytest.fail(f"{missing[0]} is missing: run `make notebooks` (make test does)")
    kernel = reader_envs.colab_env(ENVS / "colab")
    runs = [Run(p.stem, nbformat.read(p, as_version=4), None, ROBUSTNESS_SLICE) for p in generated]
    return _run_in(ENVS / "colab", kernel, runs)


@pytest.fixture(scope="module")
def binder_runs():
    kernel = reader_envs.binder_env(ENVS / "binder")
    runs = [Run(c.stem, jupytext.read(c), c.parent) for c in CHAPTERS]
    return _run_in(ENVS / "binder", kernel, runs)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_in_a_colab_like_environment_at_a_shifted_seed_and_cpu_kernel(chapter, colab_runs):
    run = colab_runs[chapter.stem]
    assert run.errors == [], f"{chapter.stem} failed in the Colab-like environment ({ROBUSTNESS_SLICE})"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_in_a_binder_like_environment_and_reproduces_the_book(chapter, binder_runs, built_html):
    run = binder_runs[chapter.stem]
    assert run.errors == [], f"{chapter.stem} failed in the Binder-like environment"
    book_run = built_html.parent / "jupyter_execute" / chapter.relative_to(ROOT).with_suffix(".ipynb")
    expected = text_outputs(nbformat.read(book_run, as_version=4))
    got = text_outputs(run.notebook)
    assert set(expected) <= set(got)
    differing = [src.splitlines()[0] for src in expected if expected[src] != got[src]]
    assert differing == [], "outputs differ from the book's build (seed them, or tag wall-clock cells `timing`)"


def test_colab_environment_has_no_build_tools(colab_runs):
    """The stand-in for Colab must not hide a dependency on a build-only tool, nor import the checkout."""
    python = ENVS / "colab" / "bin" / "python"
    code = ("import importlib.util as u, attnbook; print(attnbook.__file__); "
            "print([m for m in ('myst_nb', 'jupytext', 'sphinx', 'jupyter_book') if u.find_spec(m)])")
    where, build_tools = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                        check=True).stdout.split()
    assert build_tools == "[]"
    assert "site-packages" in where and str(ROOT / "code") not in where   # the wheel, not the checkout

"""Every chapter where readers open it: a Colab-like and a Binder-like clean environment, from nothing.

- Colab: the generated notebooks (`make notebooks`) from an empty folder, in an env holding only what Colab
  preinstalls plus a wheel of the package. This run is also the robustness slice of `make test`: seeds shifted
  by 1 and torch's portable CPU kernels (`ATEN_CPU_CAPABILITY=default`), so every claim must hold on numbers
  other than the build's.
- Binder: the same generated notebooks, as the pages' Binder button opens them (the `notebooks` branch), in an env
  made from the `binder/requirements.txt` written beside them; at the build's seed and kernel their text outputs
  must equal the book's (reproducibility), except where the notebook differs by design: the reference solutions
  do not run there, so each exercise check says 还没有实现 instead of 通过.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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


def _generated() -> list:
    paths = [ROOT / "_build" / "notebooks" / c.relative_to(ROOT).with_suffix(".ipynb") for c in CHAPTERS]
    missing = [p for p in paths if not p.exists()]
    if missing:
        pytest.fail(f"{missing[0]} is missing: run `make notebooks` (make test does)")
    return paths


@pytest.fixture(scope="module")
def colab_runs():
    kernel = reader_envs.colab_env(ENVS / "colab")
    runs = [Run(p.stem, nbformat.read(p, as_version=4), None, ROBUSTNESS_SLICE) for p in _generated()]
    return _run_in(ENVS / "colab", kernel, runs)


@pytest.fixture(scope="module")
def binder_runs():
    generated = _generated()   # first: binder_env reads the requirements make notebooks writes beside them
    kernel = reader_envs.binder_env(ENVS / "binder")
    runs = [Run(p.stem, nbformat.read(p, as_version=4), None) for p in generated]
    return _run_in(ENVS / "binder", kernel, runs)


def _reproduced(source: str) -> bool:
    """False for an exercise check: the book runs the solution (通过), the notebook does not (还没有实现)."""
    return "exercises.check(" not in source


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_in_a_colab_like_environment_at_a_shifted_seed_and_cpu_kernel(chapter, colab_runs):
    run = colab_runs[chapter.stem]
    assert run.errors == [], f"{chapter.stem} failed in the Colab-like environment ({ROBUSTNESS_SLICE})"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_in_a_binder_like_environment_and_reproduces_the_book(chapter, binder_runs, built_html):
    run = binder_runs[chapter.stem]
    assert run.errors == [], f"{chapter.stem} failed in the Binder-like environment"
    book_run = built_html.parent / "jupyter_execute" / chapter.relative_to(ROOT).with_suffix(".ipynb")
    book = nbformat.read(book_run, as_version=4)
    book.cells = [c for c in book.cells if notebooks.SOLUTION_TAG not in c.metadata.get("tags", [])]
    expected = {src: out for src, out in text_outputs(book).items() if _reproduced(src)}
    got = text_outputs(run.notebook)
    assert set(expected) <= set(got)
    differing = [src.splitlines()[0] for src in expected if expected[src] != got[src]]
    assert differing == [], "outputs differ from the book's build (seed them, or tag wall-clock cells `timing`)"
    checks = [src for src in got if "exercises.check(" in src]
    assert all("还没有实现" in "".join(got[src]) for src in checks), "an exercise check did not say 还没有实现"


def test_colab_environment_has_no_build_tools(colab_runs):
    """The stand-in for Colab must not hide a dependency on a build-only tool, nor import the checkout."""
    python = ENVS / "colab" / "bin" / "python"
    code = ("import importlib.util as u, attnbook; print(attnbook.__file__); "
            "print([m for m in ('myst_nb', 'jupytext', 'sphinx', 'jupyter_book') if u.find_spec(m)])")
    where, build_tools = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                        check=True).stdout.split()
    assert build_tools == "[]"
    assert "site-packages" in where and str(ROOT / "code") not in where   # the wheel, not the checkout


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
GIT_LINE = re.compile(r"^attnbook @ git\+\S+$", re.M)


def _readme_linux_recipe() -> list[str]:
    """The commands of README.md's Linux local-install block (the fenced block after its marker)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- local-install-linux -->", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def _reachable(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=10).close()
        return True
    except OSError:
        return False


def _local_cpu_index(tmp: Path) -> str:
    """A stand-in for PyTorch's CPU index holding the CPU torch wheel pip finds for this machine (its cache or
    find-links): the project's machines reach PyPI only."""
    wheels = tmp / "wheels"
    version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), f"torch=={version}"],
                   check=True)
    (wheel,) = wheels.glob("torch-*.whl")
    assert "+cpu" in wheel.name, f"the stand-in index needs the CPU wheel, pip found {wheel.name}"
    index = tmp / "simple" / "torch"
    index.mkdir(parents=True)
    (index / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    return (tmp / "simple").as_uri()


def test_readme_local_cpu_install_works_in_a_clean_venv(tmp_path):
    """README's Linux recipe, run line by line in a clean venv: it installs the CPU torch wheel (no CUDA, no nvidia
    packages), attnbook and JupyterLab, and a coding exercise's check answers 还没有实现 for an unfinished stub.

    Stand-ins where this machine has no network: the clone is a copy of `make notebooks`' output, the pinned
    `attnbook @ git+…` line a wheel of this checkout, and PyTorch's CPU index a local index of the CPU wheel when
    download.pytorch.org cannot be reached."""
    notebooks_dir = ROOT / "_build" / "notebooks"
    if not (notebooks_dir / "binder" / "requirements.txt").exists():
        pytest.fail("_build/notebooks/binder/requirements.txt is missing: run `make notebooks` (make test does)")
    cpu_index = CPU_INDEX if _reachable(f"{CPU_INDEX}/torch/") else _local_cpu_index(tmp_path)
    attnbook_wheel = reader_envs.attnbook_wheel(Path(sys.executable), tmp_path / "attnbook")

    script = []
    for line in _readme_linux_recipe():
        if line.startswith("git clone"):
            target = line.split()[-1]
            script.append(f"cp -r {notebooks_dir} {target}")
            script.append(f"sed -i -E 's#^attnbook @ git\\+.*$#attnbook @ {attnbook_wheel.as_uri()}#; "
                          f"s#{CPU_INDEX}#{cpu_index}#' {target}/binder/requirements.txt")
        else:
            script.append(line.replace(CPU_INDEX, cpu_index))
    check = ("import importlib.metadata as md, torch, attnbook\n"
             "from attnbook import exercises\n"
             "assert torch.version.cuda is None, torch.__version__\n"
             "cuda = [d.metadata['Name'] for d in md.distributions() if d.metadata['Name'].lower().startswith('nvidia')]\n"
             "assert not cuda, cuda\n"
             "def stable_softmax(z):\n    raise NotImplementedError\n"
             "print(exercises.check('stable_softmax', stable_softmax))\n")
    script += ["jupyter lab --version", f"python - <<'PY'\n{check}PY"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PIP_NO_COMPILE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")   # no byte-compiling torch: minutes on 2 cores
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "还没有实现" in done.stdout

"""Clean virtual environments standing in for a Colab and a Binder reader (used by ``make test``).

- Colab-like: only what Colab preinstalls that the book uses (versions close to Colab's in 2025, on the
  project's Python) plus a wheel of ``attnbook`` built from the checkout, standing in for the notebook's own
  install cell. No Jupyter Book, no myst-nb, no jupytext.
- Binder-like: the ``binder/requirements.txt`` that ``make notebooks`` writes beside the notebooks (the branch
  Binder opens), as repo2docker installs it, plus the kernel that repo2docker's base environment brings; its
  ``attnbook @ git+…@commit`` line is met by a wheel of this checkout (the machines here reach PyPI only).

Each gets a Jupyter kernel spec named ``attnbook-<name>`` under ``<env>/share/jupyter``; start notebooks in it
inside ``with kernels_of(env):``, which puts that folder on ``JUPYTER_PATH``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What Colab preinstalls that the chapters use (Colab, 2025: numpy 2.0.2, matplotlib 3.10, ipywidgets 7.7.1,
# ipykernel 6.17); torch comes from constraints.txt (the project's CPU wheel; Colab has its own torch).
COLAB_PACKAGES = ["torch", "numpy==2.0.2", "matplotlib==3.10.0", "ipywidgets==7.7.1", "ipykernel==6.17.1"]
BINDER_KERNEL = ["ipykernel"]  # repo2docker's base environment runs the kernel


def _quiet(cmd: list[str], **kwargs) -> None:
    """Run a command; show its output only when it fails."""
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-4000:]}")


def _pip(python: Path, *args: str) -> None:
    _quiet([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", *args])


def _fresh_venv(path: Path, key: str) -> tuple[Path, bool]:
    """(python, reused): reuse ``path`` when it was made for the same ``key``, else make it anew."""
    python = path / "bin" / "python"
    stamp = path / ".key"
    if python.exists() and stamp.exists() and stamp.read_text() == key:
        return python, True
    shutil.rmtree(path, ignore_errors=True)
    _quiet([sys.executable, "-m", "venv", str(path)])
    return python, False


def _key(*files: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def _kernel(python: Path, name: str) -> str:
    """Register the env's kernel as ``attnbook-<name>`` under ``<env>/share/jupyter``."""
    prefix = python.parent.parent
    _quiet([str(python), "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", f"attnbook-{name}"])
    return f"attnbook-{name}"


@contextlib.contextmanager
def kernels_of(env: Path):
    """``os.environ`` for starting the env's kernels: its kernel spec on JUPYTER_PATH, and bytecode written.

    pip installs without byte-compiling (compiling all of torch was half of building each env); the first kernel
    that imports a module writes its bytecode for the others, even where PYTHONDONTWRITEBYTECODE is set.
    """
    saved = dict(os.environ)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(env / "share" / "jupyter"),
                                                               saved.get("JUPYTER_PATH")]))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def attnbook_wheel(python: Path, out: Path) -> Path:
    """A wheel of ``attnbook`` built from the checkout into ``out``, as `pip install git+…@commit` builds it from a
    clone: from a copy of what the build reads, so setuptools' build/ folder lands in the copy, not the checkout."""
    source = out / "src"
    shutil.copytree(ROOT / "code" / "attnbook", source / "code" / "attnbook", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    _quiet([str(python), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out / "wheels"), str(source)])
    (wheel,) = (out / "wheels").glob("attnbook-*.whl")
    return wheel


def _install_attnbook(python: Path, cons: list[str]) -> None:
    """attnbook from a wheel of this checkout, then its declared dependencies."""
    with tempfile.TemporaryDirectory() as tmp:
        wheel = str(attnbook_wheel(python, Path(tmp)))
        _pip(python, *cons, "--force-reinstall", "--no-deps", wheel)
        _pip(python, *cons, wheel)  # its declared dependencies


def colab_env(path: Path, constraints: Path | None = ROOT / "constraints.txt") -> str:
    """A Colab-like env at ``path`` with attnbook installed from a wheel of this checkout; returns the kernel name."""
    cons = ["-c", str(constraints)] if constraints else []
    key = _key(ROOT / "pyproject.toml", *([constraints] if constraints else []), extra=" ".join(COLAB_PACKAGES))
    python, reused = _fresh_venv(path, key)
    if not reused:
        _pip(python, "--upgrade", "pip")
        _pip(python, *cons, *COLAB_PACKAGES)
    _install_attnbook(python, cons)
    (path / ".key").write_text(key)
    return _kernel(python, "colab")


def binder_env(path: Path, requirements: Path = ROOT / "_build" / "notebooks" / "binder" / "requirements.txt",
               constraints: Path | None = ROOT / "constraints.txt") -> str:
    """A Binder-like env at ``path`` from the notebooks' ``binder/requirements.txt``; returns the kernel name.

    The requirements' ``--extra-index-url`` (the CPU torch index Binder uses) is left out: the project's
    machines reach PyPI only, and take torch from ``constraints``.
    """
    if not requirements.exists():
        raise FileNotFoundError(f"{requirements} is missing: run `make notebooks`")
    cons = ["-c", str(constraints)] if constraints else []
    lines = requirements.read_text().splitlines()
    kept = [l for l in lines if not l.startswith(("--extra-index-url", "attnbook @"))]
    if len(kept) != len(lines) - 2:
        raise ValueError(f"{requirements}: expected one --extra-index-url and one 'attnbook @ git+…' line")
    key = _key(ROOT / "pyproject.toml", *([constraints] if constraints else []), extra="\n".join(kept))
    python, reused = _fresh_venv(path, key)
    if not reused:
        (path / "binder-requirements.txt").write_text("\n".join(kept) + "\n")
        _pip(python, "--upgrade", "pip")
        _pip(python, *cons, "-r", str(path / "binder-requirements.txt"), *BINDER_KERNEL)
    _install_attnbook(python, cons)   # stands in for the pinned `attnbook @ git+…@commit` line
    (path / ".key").write_text(key)
    return _kernel(python, "binder")

"""Chapter runtime: shiftable seeds, device, figure style, glue, and the provenance line every chapter ends with."""

from __future__ import annotations

import datetime
import html
import json
import numbers
import os
import platform
import random
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

_chapter_start: float | None = None

SEED_SHIFT_VARIABLE = "ATTNBOOK_SEED_SHIFT"  # make robustness / make test set it to draw new numbers everywhere
GLUE_VARIABLE = "ATTNBOOK_GLUE"              # set by the book build (code/booktools/parallel_execution.py)
_GLUE_PREFIX = "application/papermill.record/"  # the mime prefix myst-nb's glue reads back


def pick_device() -> torch.device:
    """CUDA when present, else CPU: chapters run unchanged on either."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_shift() -> int:
    """The integer added to every seed a chapter uses (environment variable ``ATTNBOOK_SEED_SHIFT``, default 0)."""
    text = os.environ.get(SEED_SHIFT_VARIABLE, "0").strip() or "0"
    if not text.isdigit():
        raise ValueError(f"{SEED_SHIFT_VARIABLE} must be a non-negative integer, got {text!r}")
    return int(text)


def seed(n: int) -> int:
    """The seed a chapter uses where it means seed ``n``: ``n + seed_shift()``.

    Chapters never pass a literal seed to an RNG: a robustness run shifts them all with one setting.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"a seed must be a non-negative integer, got {n!r}")
    return int(n) + seed_shift()


def generator(n: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed(n)``."""
    return torch.Generator(device).manual_seed(seed(n))


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device) so two builds print the same numbers."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def start_chapter() -> torch.device:
    """First cell of every chapter: one CPU thread, seed ``seed(0)``, figure style, start the clock; returns the device.

    In the book build (``ATTNBOOK_GLUE`` set) every figure shown is checked as it is drawn
    (``plot.check_shown_figures``): a missing glyph raises, and the figure's text is kept in the output.

    One thread because float sums are split differently across threads: with it, a trained model and every
    printed digit are the same on any core count (the book's small tensors gain little from more threads).
    """
    global _chapter_start
    from .plot import check_shown_figures, use_book_style

    torch.set_num_threads(1)
    seed_everything(seed(0))
    use_book_style()
    if os.environ.get(GLUE_VARIABLE):  # the book build: a missing glyph fails, each figure's text is recorded
        check_shown_figures()
    _chapter_start = time.perf_counter()
    return pick_device()


def glue(name: str, value, display: bool = False) -> None:
    """Hand ``value`` to the book's prose (myst-nb's ``{glue}`` roles) without importing myst-nb.

    In the book build (``ATTNBOOK_GLUE`` set) this emits the display bundle myst-nb's own ``glue`` emits.
    Elsewhere (Colab, Binder, a local Jupyter) no reader needs the bundle: ``display=True`` shows the value,
    ``display=False`` does nothing.
    """
    try:
        from IPython import get_ipython
        from IPython.core.formatters import format_display_data
        from IPython.display import display as ipy_display
    except ImportError:  # plain Python: nothing to show
        return
    if not os.environ.get(GLUE_VARIABLE):
        if display and get_ipython() is not None:
            ipy_display(value)
        return
    if isinstance(value, np.generic) or (isinstance(value, torch.Tensor) and value.numel() == 1):
        value = value.item()  # repr 'np.float64(0.75)' would not parse as a number in the {glue:text} format spec
    bundle, metadata = format_display_data(value)
    prefix = "" if display else _GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def device_name(device: torch.device | None = None) -> str:
    device = device or pick_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    # The kernel path (ATEN_CPU_CAPABILITY) decides the bits of every float result.
    return f"CPU（{os.cpu_count()} 核，{platform.machine()}，{torch.backends.cpu.get_cpu_capability()}）"


@dataclass(frozen=True)
class Provenance:
    """Where and how a chapter was executed; shown as one line at the end of the chapter."""

    torch_version: str
    device: str
    seconds: float
    date: str
    seed_shift: int = 0

    def __str__(self) -> str:
        shift = f" · 种子偏移 {self.seed_shift}" if self.seed_shift else ""
        return (f"本章在构建时执行：torch {self.torch_version} · {self.device} · "
                f"用时 {self.seconds:.1f} s · {self.date}{shift}")

    def _repr_html_(self) -> str:
        # data-record is read back by the book's provenance page (code/booktools/provenance_page.py).
        record = html.escape(json.dumps(asdict(self), ensure_ascii=False))
        return f'<p class="attnbook-provenance" data-record="{record}">{html.escape(str(self))}</p>'


def provenance() -> Provenance:
    """Last cell of every chapter: torch version, device and seconds since ``start_chapter``."""
    if _chapter_start is None:
        raise RuntimeError("call attnbook.start_chapter() in the chapter's first cell")
    return Provenance(torch.__version__, device_name(), time.perf_counter() - _chapter_start,
                      datetime.date.today().isoformat(), seed_shift())

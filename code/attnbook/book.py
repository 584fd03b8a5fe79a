"""Chapter runtime: seeds, device, figure style, and the provenance line every chapter ends with."""

from __future__ import annotations

import datetime
import html
import json
import os
import platform
import random
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

_chapter_start: float | None = None


def pick_device() -> torch.device:
    """CUDA when present, else CPU: chapters run unchanged on either."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device) so two builds print the same numbers."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def start_chapter(seed: int = 0) -> torch.device:
    """First cell of every chapter: one CPU thread, seed, figure style, start the clock; returns the device.

    One thread because float sums are split differently across threads: with it, a trained model and every
    printed digit are the same on any core count (the book's small tensors gain little from more threads).
    """
    global _chapter_start
    from .plot import use_book_style

    torch.set_num_threads(1)
    seed_everything(seed)
    use_book_style()
    _chapter_start = time.perf_counter()
    return pick_device()


def device_name(device: torch.device | None = None) -> str:
    device = device or pick_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({os.cpu_count()} cores, {platform.machine()})"


@dataclass(frozen=True)
class Provenance:
    """Where and how a chapter was executed; shown as one line at the end of the chapter."""

    torch_version: str
    device: str
    seconds: float
    date: str

    def __str__(self) -> str:
        return (f"本章在构建时执行：torch {self.torch_version} · {self.device} · "
                f"用时 {self.seconds:.1f} s · {self.date}")

    def _repr_html_(self) -> str:
        # data-record is read back by the book's provenance page (code/booktools/provenance_page.py).
        record = html.escape(json.dumps(asdict(self), ensure_ascii=False))
        return f'<p class="attnbook-provenance" data-record="{record}">{html.escape(str(self))}</p>'


def provenance() -> Provenance:
    """Last cell of every chapter: torch version, device and seconds since ``start_chapter``."""
    if _chapter_start is None:
        raise RuntimeError("call attnbook.start_chapter() in the chapter's first cell")
    return Provenance(torch.__version__, device_name(), time.perf_counter() - _chapter_start,
                      datetime.date.today().isoformat())

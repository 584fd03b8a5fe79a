"""Sphinx extension: how many errata the book lists, counted from the sources at every build.

An entry of the appendix (chapters/errata.md) starts with an ``(erratum-…)=`` label; an erratum note in a
chapter (one sentence linking the appendix, or an older ``勘误`` admonition) starts with an ``(errata-<chapter>-…)=`` label. The counts become the MyST
substitutions ``{{ errata_count }}`` and ``{{ errata_box_count }}``, so no page types them by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

ENTRY = re.compile(r"^\((erratum-[\w-]+)\)=$", re.M)
BOX = re.compile(r"^\((errata-[a-z_]+-[\w-]+)\)=$", re.M)


def entry_labels(chapters: Path) -> list[str]:
    return ENTRY.findall((chapters / "errata.md").read_text(encoding="utf-8"))


def box_labels(chapters: Path) -> list[str]:
    return [label for path in sorted(chapters.glob("*.md")) if path.name != "errata.md"
            for label in BOX.findall(path.read_text(encoding="utf-8"))]


def substitutions(chapters: Path) -> dict[str, str]:
    return {"errata_count": str(len(entry_labels(chapters))), "errata_box_count": str(len(box_labels(chapters)))}


def _add_substitutions(app, config) -> None:
    # Set before the environment is loaded: a changed count changes the config, so Sphinx re-reads every page.
    config.myst_substitutions = {**config.myst_substitutions, **substitutions(Path(app.srcdir) / "chapters")}


def setup(app):
    app.connect("config-inited", _add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

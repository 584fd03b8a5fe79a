"""The figure-text check: which words of a figure's (or widget's) text are English and not on the allow-list.

Single Latin letters, with digits or subscripts (q, k, d_k, x1, W_q), are symbols and always pass; text inside
``$…$`` is mathtext; any other Latin word must be on ``figure_text_allow.toml`` (each entry with a reason).
A code identifier passes when each of its ``_``-separated parts is a symbol or on the list.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ALLOW = Path(__file__).with_name("figure_text_allow.toml")
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
MATH = re.compile(r"(?<!\\)\$.+?(?<!\\)\$")


def load_allowed(path: Path = ALLOW) -> dict[str, str]:
    """word -> reason."""
    return tomllib.loads(path.read_text(encoding="utf-8"))["words"]


def load_chapter_words(path: Path = ALLOW) -> dict[str, dict[str, str]]:
    """docname -> {word: reason}: data a chapter shows as it is (e.g. the tokens of an English sentence)."""
    return tomllib.loads(path.read_text(encoding="utf-8")).get("chapter", {})


def english_words(text: str, allowed) -> list[str]:
    """The words of ``text`` a reader would see as English (not symbols, maths or allowed names)."""
    bad = []
    for token in WORD.findall(MATH.sub(" ", text)):
        parts = [p for p in re.split(r"[_0-9]+", token) if p]
        if token not in allowed and not all(len(p) == 1 or p in allowed for p in parts):
            bad.append(token)
    return bad

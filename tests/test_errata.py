"""The errata: each entry quotes its source word for word; each erratum has one box in the chapters; counts are built."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import errata_count  # noqa: E402

CHAPTERS = ROOT / "chapters"
# The five source notes (DESIGN.md: ../shared/seeds); not part of the repository.
SEEDS = Path(os.environ.get("ATTNBOOK_SEEDS", ROOT.parent / "shared" / "seeds"))
LABEL = re.compile(r"^\((errat(?:um|a)-[\w-]+)\)=$", re.M)
SOURCE = re.compile(r"资料 (\d{3})")
QUOTE = re.compile(r"^[ \t]*> ?(.*)$", re.M)
BOX_OPEN = re.compile(r"^:::\{admonition\} 勘误（资料 \d{3}(?:、\d{3})*）：\S.*\n:class: warning dropdown$", re.M)


def normalized(text: str) -> str:
    """Compare quotes with the seeds regardless of layout, TeX delimiters and Markdown emphasis."""
    return re.sub(r"\s+|\$|\\[()\[\]]|\*|`", "", text)


def appendix_entries(text: str) -> dict[str, str]:
    """erratum label -> its text, up to the next label of the appendix."""
    parts = LABEL.split(text)
    return {label: body for label, body in zip(parts[1::2], parts[2::2]) if label.startswith("erratum-")}


def chapter_boxes() -> dict[str, str]:
    """errata-<chapter>-… label -> the erratum admonition it names."""
    boxes = {}
    for path in sorted(CHAPTERS.glob("*.md")):
        if path.name == "errata.md":
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^\((errata-[a-z_]+-[\w-]+)\)=\n(:::\{admonition\} 勘误.*?^:::$)", text, re.M | re.S):
            boxes[m[1]] = m[2]
    return boxes


def quotes(block: str) -> list[tuple[str, set[str]]]:
    """Each quoted line with the source notes named before it in the same entry or box."""
    return [(m[1], set(SOURCE.findall(block[:m.start()]))) for m in QUOTE.finditer(block) if m[1].strip()]


def unquoted(block: str) -> list[str]:
    """The quotes of a block that no source note named before them contains (elisions '……' allowed)."""
    seeds = {p.name[:3]: normalized(p.read_text(encoding="utf-8")) for p in SEEDS.glob("*.txt")}
    bad = []
    for quote, named in quotes(block):
        pieces = [normalized(piece) for piece in quote.split("……") if normalized(piece)]
        if not named or not all(any(piece in seeds[n] for n in named) for piece in pieces):
            bad.append(quote[:80])
    return bad


ENTRIES = appendix_entries((CHAPTERS / "errata.md").read_text(encoding="utf-8"))
BOXES = chapter_boxes()
needs_seeds = pytest.mark.skipif(not SEEDS.is_dir(), reason=f"source notes not found at {SEEDS} (set ATTNBOOK_SEEDS)")


def test_entries_are_numbered_in_order_and_listed_once_in_the_summary():
    numbers = [int(re.match(r"\n### (\d+)\. \S", body)[1]) for body in ENTRIES.values()]
    assert numbers == list(range(1, len(ENTRIES) + 1)) and len(ENTRIES) > 20
    summary = (CHAPTERS / "errata.md").read_text(encoding="utf-8").split("(errata-summary)=")[1].split("\n(")[0]
    assert re.findall(r"^\| \{ref\}`(erratum-[\w-]+)` \|", summary, re.M) == list(ENTRIES)


def test_the_built_counts_are_the_entries_and_boxes():
    subs = errata_count.substitutions(CHAPTERS)
    assert subs == {"errata_count": str(len(ENTRIES)), "errata_box_count": str(len(BOXES))}
    assert "{{ errata_count }}" in (CHAPTERS / "errata.md").read_text(encoding="utf-8")


@needs_seeds
def test_the_quote_check_catches_a_paraphrase():
    block = "**原文**（资料 000）：\n\n> 当Q矩阵和K矩阵完全相关时，两个向量同向，那么点积为1。\n\n> 两个向量同向时，点积等于 1。\n"
    assert unquoted(block) == ["两个向量同向时，点积等于 1。"]
    assert unquoted(block.replace("资料 000", "资料 004"))[0].startswith("当Q矩阵")   # the wrong source note


@needs_seeds
@pytest.mark.parametrize("label", list(ENTRIES))
def test_every_entry_quotes_its_source_word_for_word(label):
    body = ENTRIES[label]
    assert quotes(body), f"{label}: no quoted source text"
    assert unquoted(body) == []


@needs_seeds
@pytest.mark.parametrize("label", list(BOXES))
def test_every_box_is_collapsed_and_quotes_its_source_word_for_word(label):
    box = BOXES[label]
    assert BOX_OPEN.match(box), f"{label}: not a collapsed 勘误（资料 …）：summary box"
    assert quotes(box), f"{label}: no quoted source text"
    assert unquoted(box) == []


def test_each_erratum_has_one_home_and_each_box_links_its_entries():
    homes = {label: set(re.findall(r"<(errata-[a-z_]+-[\w-]+)>", body.split("**正文。**")[1]))
             for label, body in ENTRIES.items()}
    assert all(len(boxes) <= 1 for boxes in homes.values()), {k: v for k, v in homes.items() if len(v) > 1}
    for box, text in BOXES.items():
        hosted = {label for label, boxes in homes.items() if box in boxes}
        assert hosted, f"{box}: no appendix entry points to it"
        assert hosted <= set(re.findall(r"\{ref\}`(erratum-[\w-]+)`", text)), f"{box} does not link all it hosts"


def test_no_source_sentence_is_quoted_in_two_boxes():
    seen = {}
    for box, text in BOXES.items():
        for quote, _ in quotes(text):
            assert normalized(quote) not in seen, f"{box} repeats a quote of {seen.get(normalized(quote))}"
            seen[normalized(quote)] = box

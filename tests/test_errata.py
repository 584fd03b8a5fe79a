"""The errata: each entry quotes its source word for word; each erratum has one note in the chapters (one sentence
linking the appendix, or, while a chapter still has one, a collapsed box that quotes word for word); counts are built."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import errata_count  # noqa: E402

CHAPTERS = ROOT / "chapters"
# The five source notes (DESIGN.md: ../shared/seeds) are not part of the repository; DIGESTS holds a SHA-256 of
# each (note, quoted piece) pair checked against them, so the quote check also runs where they are absent.
SEEDS = Path(os.environ.get("ATTNBOOK_SEEDS", ROOT.parent / "shared" / "seeds"))
DIGESTS = ROOT / "tests" / "errata_quotes.sha256"
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
    """errata-<chapter>-… label -> the note it names: the 勘误 admonition after it, else the paragraph after it."""
    boxes = {}
    for path in sorted(CHAPTERS.glob("*.md")):
        if path.name == "errata.md":
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^\((errata-[a-z_]+-[\w-]+)\)=\n", text, re.M):
            rest = text[m.end():].lstrip("\n")
            box = re.match(r":::\{admonition\} 勘误.*?^:::$", rest, re.M | re.S)
            boxes[m[1]] = box[0] if box else rest.split("\n\n")[0]
    return boxes



def quotes(block: str) -> list[tuple[str, set[str]]]:
    """Each quoted line with the source notes named before it in the same entry or box."""
    return [(m[1], set(SOURCE.findall(block[:m.start()]))) for m in QUOTE.finditer(block) if m[1].strip()]


def digest(source: str, piece: str) -> str:
    return hashlib.sha256(f"{source}\0{piece}".encode()).hexdigest()


def _seeds() -> dict[str, str] | None:
    return ({p.name[:3]: normalized(p.read_text(encoding="utf-8")) for p in SEEDS.glob("*.txt")}
            if SEEDS.is_dir() else None)


def _verified() -> set[str]:
    return set(DIGESTS.read_text().split()) if DIGESTS.exists() else set()


def found(source: str, piece: str) -> bool:
    """Where the source notes are present, search them; elsewhere (CI, a reader's clone) the piece must be one that
    was checked against them: its digest is in DIGESTS, which `python tests/test_errata.py` rewrites from the seeds."""
    return piece in SEED_TEXT[source] if SEED_TEXT is not None else digest(source, piece) in VERIFIED


def pieces(quote: str) -> list[str]:
    """The normalized parts of a quote between its elisions '……' (empty parts dropped)."""
    return [p for p in map(normalized, quote.split("……")) if p]


def unquoted(block: str) -> list[str]:
    """The quotes of a block that no source note named before them contains (elisions '……' allowed)."""
    bad = []
    for quote, named in quotes(block):
        if not named or not all(any(found(n, piece) for n in named) for piece in pieces(quote)):
            bad.append(quote[:80])
    return bad


def quoted_digests(blocks) -> set[str]:
    """The digest of every (source note, quoted piece) pair the book's errata quote."""
    return {digest(n, piece) for block in blocks for quote, named in quotes(block) for piece in pieces(quote)
            for n in named if SEED_TEXT is None or piece in SEED_TEXT[n]}


ENTRIES = appendix_entries((CHAPTERS / "errata.md").read_text(encoding="utf-8"))
BOXES = chapter_boxes()
SEED_TEXT = _seeds()
VERIFIED = _verified()


def test_entries_are_numbered_in_order_and_listed_once_in_the_summary():
    numbers = [int(re.match(r"\n### (\d+)\. \S", body)[1]) for body in ENTRIES.values()]
    assert numbers == list(range(1, len(ENTRIES) + 1)) and len(ENTRIES) > 20
    summary = (CHAPTERS / "errata.md").read_text(encoding="utf-8").split("(errata-summary)=")[1].split("\n(")[0]
    assert re.findall(r"^\| \{ref\}`(erratum-[\w-]+)` \|", summary, re.M) == list(ENTRIES)


def test_the_built_counts_are_the_entries_and_boxes():
    subs = errata_count.substitutions(CHAPTERS)
    assert subs == {"errata_count": str(len(ENTRIES)), "errata_box_count": str(len(BOXES))}
    assert "{{ errata_count }}" in (CHAPTERS / "errata.md").read_text(encoding="utf-8")


def test_the_quote_check_catches_a_paraphrase_and_a_wrong_source():
    quote, named = quotes(next(iter(ENTRIES.values())))[0]
    paraphrase = quote[:len(quote) // 2] + "大致" + quote[len(quote) // 2:]
    block = f"**原文**（资料 {min(named)}）：\n\n> {quote}\n\n> {paraphrase}\n"
    assert unquoted(block) == [paraphrase[:80]]
    wrong = next(n for n in ("000", "001", "002", "003", "004") if not found(n, pieces(quote)[0]))
    assert unquoted(block.replace(f"资料 {min(named)}", f"资料 {wrong}"))[0] == quote[:80]


def test_the_digests_are_those_of_the_quotes_the_appendix_makes():
    # The appendix holds every quote. With the source notes present the digests must be exactly its quotes (run this
    # file as a script to rewrite them); without, none may be stale (that every quote was checked is the tests below).
    made = quoted_digests(ENTRIES.values())
    assert made == VERIFIED if SEED_TEXT is not None else VERIFIED <= made, "run: python tests/test_errata.py"


@pytest.mark.parametrize("label", list(ENTRIES))
def test_every_entry_quotes_its_source_word_for_word(label):
    body = ENTRIES[label]
    assert quotes(body), f"{label}: no quoted source text"
    assert unquoted(body) == []


def inline_quotes(note: str) -> list[str]:
    """“…” quotes of a one-sentence note (of four characters or more: shorter ones are words, not quotations)."""
    return re.findall(r"“([^”]{4,})”", note)


def in_appendix(source: str, piece: str) -> bool:
    """A piece of an appendix quote of that source (the appendix quotes are the ones checked against the notes)."""
    return any(piece in normalized(q) for body in ENTRIES.values() for q, named in quotes(body) if source in named)


@pytest.mark.parametrize("label", list(BOXES))
def test_every_note_is_one_sentence_or_a_collapsed_box_quoting_word_for_word(label):
    note = BOXES[label]
    if quotes(note):          # the older form, while a chapter still has it: a collapsed box quoting word for word
        assert BOX_OPEN.match(note), f"{label}: not a collapsed 勘误（资料 …）：summary box"
        assert unquoted(note) == []
        return
    # the form the chapters move to: one sentence (a paragraph or an admonition's body) that links the appendix
    body = re.sub(r"^:::\{admonition\}.*\n(?::\w+:.*\n)*|^:::$", "", note, flags=re.M).strip()
    assert re.search(r"\{ref\}`erratum-[\w-]+`", body), f"{label}: does not link an appendix entry"
    assert not re.search(r"[。！？]", body.rstrip("。！？")), f"{label}: more than one sentence"
    named = set(SOURCE.findall(body))
    for q in inline_quotes(body):   # what it quotes from a named source is the source's own words
        assert all(any(found(n, piece) if SEED_TEXT is not None else in_appendix(n, piece) for n in named)
                   for piece in pieces(q)), f"{label}: “{q[:40]}” is not in 资料 {sorted(named)}"


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


if __name__ == "__main__":
    if SEED_TEXT is None:
        sys.exit(f"source notes not found at {SEEDS} (set ATTNBOOK_SEEDS)")
    DIGESTS.write_text("\n".join(sorted(quoted_digests(ENTRIES.values()))) + "\n")
    print(f"{DIGESTS.relative_to(ROOT)}: {len(DIGESTS.read_text().split())} quoted pieces")

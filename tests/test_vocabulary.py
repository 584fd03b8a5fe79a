"""One vocabulary and one page structure: the word table of the notation page holds in every chapter's prose,
and every numbered chapter opens with what the reader will learn and ends with a summary."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import claims_audit  # noqa: E402

NOTATION = ROOT / "chapters" / "notation.md"
OPENING = "学完本章，你应当能够："


def word_table() -> list[tuple[str, str]]:
    """(preferred, discouraged) rows of the table under '## 用词' on the notation page; a note in （…） is dropped."""
    section = NOTATION.read_text(encoding="utf-8").split("## 用词", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("用词", "---"):
            rows.append(tuple(re.sub(r"（.*?）", "", c).strip() for c in cells))
    return rows


WORDS = word_table()
PROSE_WORDS = [(good, bad) for good, bad in WORDS if good not in ("练习", "参考文献")]


def discouraged(bad: str) -> re.Pattern:
    """The word where it is not part of a longer Latin name, and not an English gloss right after '（'."""
    return re.compile(r"(?<![（A-Za-z_.-])" + re.escape(bad) + r"(?![A-Za-z_(])")


def prose_lines(chapter: str) -> list[tuple[int, str]]:
    """(line, text) of the prose of a page, with code, math, code spans and quoted source text reduced away."""
    text = (claims_audit.CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8")
    blocks, _, _ = claims_audit.parse(chapter, text)
    out = []
    for block in blocks:
        for lineno, line in block.lines:
            if chapter == "glossary" and not line[:1].isspace():
                continue                                    # a glossary term line lists the names, aliases included
            if chapter == "notation" and line.lstrip().startswith("|"):
                continue                                    # the word table itself
            out.append((lineno, claims_audit.plain(line)))
    return out


def numbered_chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [c["file"].split("/")[-1] for part in toc["parts"] if part.get("numbered") for c in part["chapters"]]


def test_the_word_table_is_read():
    assert ("词元", "token") in WORDS and ("练习", "习题") in WORDS and ("Softmax", "softmax") in WORDS
    assert len(WORDS) >= 6


@pytest.mark.parametrize("chapter", claims_audit.chapter_names())
def test_prose_uses_one_word_per_concept(chapter):
    found = [f"{chapter}.md:{n}: '{bad}' (use '{good}'): {text.strip()[:80]}"
             for n, text in prose_lines(chapter) for good, bad in PROSE_WORDS if discouraged(bad).search(text)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("chapter", claims_audit.chapter_names())
def test_section_headings_use_one_name(chapter):
    text = (claims_audit.CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#+\s+(.*)$", text, re.M)
    bad = [h for h in headings for good, b in WORDS if good in ("练习", "参考文献") and b in h]
    assert not bad, bad


@pytest.mark.parametrize("chapter", numbered_chapters())
def test_chapter_opens_with_what_the_reader_will_learn_and_ends_with_a_summary(chapter):
    text = (claims_audit.CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8")
    first_section = text.index("\n## ")
    opening = text.find(OPENING)
    assert 0 < opening < first_section, f"{chapter}: '{OPENING}' must come before the first section"
    assert re.match(r"\s*\n- ", text[opening + len(OPENING):]), f"{chapter}: a list must follow '{OPENING}'"
    sections = re.findall(r"^## (.*)$", text, re.M)
    assert "小结" in sections, f"{chapter}: no '## 小结'"
    tail = sections[sections.index("小结") + 1:]
    assert set(tail) <= {"练习", "参考文献"}, f"{chapter}: after 小结 only 练习 and 参考文献 may follow, got {tail}"


def test_discouraged_words_are_found():
    lines = [("demo", "这里的 token 被 softmax 归一化，但 `log_softmax`、masked_softmax、tokenizer 不算，独热（one-hot）、词元（token）也不算。")]
    hits = [bad for _, text in lines for _, bad in PROSE_WORDS if discouraged(bad).search(claims_audit.plain(text))]
    assert hits == ["token", "softmax"]

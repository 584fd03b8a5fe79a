"""One vocabulary and one page structure: the word table of the notation page holds in every chapter's prose, the
symbol rules of the notation page that a pattern can check hold in every page's text (d_k, τ, 填入/填充, 1-based
head mapping, glossary terms in Chinese), and every numbered chapter opens with what the reader will learn and ends
with a summary."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import claims_audit  # noqa: E402

NOTATION = ROOT / "chapters" / "notation.md"


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
def test_chapter_opens_with_its_question_and_a_road_map_and_ends_with_a_summary(chapter):
    """The map's rule: the first sentence after the title is the chapter's question, a road map follows before the
    first section, and the 小结 comes last (only 练习 and 参考文献 after it)."""
    text = (claims_audit.CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8")
    title = re.search(r"^# .*$", text, re.M)
    opening = text[title.end():text.index("\n## ")]
    first = next(line for line in opening.splitlines() if line.strip() and not line.startswith(("(", "%")))
    assert "？" in first, f"{chapter}: the first line after the title must ask the chapter's question, got {first!r}"
    assert re.search(r"^\s*(?:[-*]|\d+\.)\s|路线", opening, re.M), f"{chapter}: no road map (a list or 路线) before the first section"
    sections = re.findall(r"^## (.*)$", text, re.M)
    assert "小结" in sections, f"{chapter}: no '## 小结'"
    tail = sections[sections.index("小结") + 1:]
    assert set(tail) <= {"练习", "参考文献"}, f"{chapter}: after 小结 only 练习 and 参考文献 may follow, got {tail}"


def page_text(chapter: str) -> list[tuple[int, str]]:
    """(line, raw text) of a page outside code cells and other fences (math, roles and code spans kept)."""
    text = (claims_audit.CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8")
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m and not line.strip().startswith("```{glossary}"):
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        out.append((n, line))
    return out


# Symbol rules of the notation page that a pattern can check: (rule, pattern over the page's text outside code).
SYMBOL_RULES = [
    ("per-head width is d_k, not d_head / D_h", re.compile(r"d_\{?\\(?:text|mathrm)\{head\}|(?<![\w\\])D_(?:h\b|\{h\})")),
    ("number of layers is N, not N_layers", re.compile(r"N_\{?\\(?:text|mathrm)\{layers\}")),
    ("temperature is τ: no logits divided by T", re.compile(r"(?:\\boldsymbol\s*z|\bz|\bs_j|\bz_i|\bz_j|\bx|\})\s*/\s*T(?![\w{])")),
    ("temperature is τ, not $T$", re.compile(r"温度\s*\$T\$|\{term\}`温度`\s*\$T\$")),
    ("heads are counted from 1 in formulas: ⌈i·H_kv/H⌉, not ⌊i/(H/H_kv)⌋", re.compile(r"\\lfloor\s*i\s*/\s*\(?H\s*/\s*H_\{?kv")),
    ("Shaw's clipping distance is k_max, not K", re.compile(r"\\operatorname\{clip\}\([^$]*?-\s*K\b")),
    ("ALiBi's slope is s_h, not m", re.compile(r"-\s*m\s*(?:\\,)?\s*(?:\(i\s*-\s*j\)|\|i\s*-\s*j\|)")),
    ("source length is T_src, not S", re.compile(r"T_\{\\text\{tgt\}\}\s*,\s*S\b|\(B\s*,\s*H\s*,\s*T\s*,\s*S\)")),
    ("填入 (not 填充) for writing −∞ into masked scores",
     re.compile(r"填充[^。；，\n]{0,10}(?:-\\infty|−∞|-∞|-inf|-1e9|-10\^9|负无穷|很大的负数)"
                r"|(?:-\\infty|−∞|-∞|-inf\b|-1e9|负无穷|很大的负数)[`$]?\s*(?:来|去)?填充")),
]


def symbol_findings(chapter: str) -> list[str]:
    return [f"{chapter}.md:{n}: {rule}: {line.strip()[:90]}"
            for n, line in page_text(chapter) for rule, rx in SYMBOL_RULES if rx.search(line)]


@pytest.mark.parametrize("chapter", claims_audit.chapter_names())
def test_symbols_follow_the_notation_page(chapter):
    found = symbol_findings(chapter)
    assert not found, "\n".join(found)


def glossary_entries() -> dict[str, str]:
    """Every name of a glossary entry -> the entry's first name (the book's term)."""
    text = (claims_audit.CHAPTERS / "glossary.md").read_text(encoding="utf-8")
    names: dict[str, str] = {}
    for block in re.findall(r"```\{glossary\}\n(.*?)```", text, re.S):
        entry: list[str] = []
        for line in block.splitlines():
            if line.strip() and not line[0].isspace():
                entry.append(line.strip())
            elif entry:
                names.update({name.lower(): entry[0] for name in entry})
                entry = []
    return names


CJK = re.compile(r"[\u4e00-\u9fff]")
TERM = re.compile(r"\{term\}`([^`<]*?)\s*(?:<([^>]*)>)?`")


@pytest.mark.parametrize("chapter", [c for c in claims_audit.chapter_names() if c != "glossary"])
def test_term_roles_show_the_chinese_term_where_the_glossary_has_one(chapter):
    names = glossary_entries()
    found = []
    for n, line in page_text(chapter):
        for m in TERM.finditer(line):
            shown, target = m.group(1).strip(), (m.group(2) or m.group(1)).strip()
            book_term = names.get(target.lower(), "")
            proper_name = bool(re.search(r"[A-Z0-9]", shown))   # FlashAttention, 3CosAdd: names may stay (rules)
            if not CJK.search(shown) and not proper_name and CJK.search(book_term):
                found.append(f"{chapter}.md:{n}: {{term}}`{m.group(0)[7:-1]}` shows English; the glossary's term is {book_term}")
    assert not found, "\n".join(found)


def test_symbol_and_term_rules_catch_what_they_name():
    bad = ["$d_{\\text{head}}$", "$2N_{\\text{layers}}BT$", "$\\sigma(\\boldsymbol z/T)$", "温度 $T$ 越高",
           "$\\lfloor i/(H/H_{kv})\\rfloor$", "$(B,H,T_{\\text{tgt}},S)$", "把被屏蔽的分数填充为 $-\\infty$",
           "用 `-inf` 填充", "$\\operatorname{clip}(j-i,-K,K)$", "$-m\\,(i-j)$"]
    good = ["$d_k$", "$\\sigma(\\boldsymbol z/\\tau)$", "$n_b=T/b$", "把序列填充到同一长度", "$\\lceil iH_{kv}/H\\rceil$",
            "填入 $-\\infty$", "$\\operatorname{clip}(j-i,\\,-k_{\\max},\\,k_{\\max})$", "$- s_h\\,(i-j)$"]
    assert all(any(rx.search(t) for _, rx in SYMBOL_RULES) for t in bad)
    assert not any(rx.search(t) for t in good for _, rx in SYMBOL_RULES)
    names = glossary_entries()
    assert names["teacher forcing"] == "教师强制" and names["padding"] == "填充"
    shown = [m.group(1) for m in TERM.finditer("{term}`teacher forcing` {term}`教师强制 <teacher forcing>` {term}`FlashAttention`")]
    assert [t for t in shown if not CJK.search(t) and not re.search(r"[A-Z0-9]", t)] == ["teacher forcing"]


def test_discouraged_words_are_found():
    lines = [("demo", "这里的 token 被 softmax 归一化，但 `log_softmax`、masked_softmax、tokenizer 不算，独热（one-hot）、词元（token）也不算。")]
    hits = [bad for _, text in lines for _, bad in PROSE_WORDS if discouraged(bad).search(claims_audit.plain(text))]
    assert hits == ["token", "softmax"]

"""Claims audit: every sentence of prose that states a number, a comparison or a superlative must be backed.

A sentence is backed when it
- is glued: holds a ``{glue:...}`` role (the number comes from the code; a comparison next to it is read off it),
- is asserted: the paragraph is followed by a MyST comment ``% claim: <id>`` and the chapter has a check whose
  claim text starts with <id> (``attnbook.check("<id>...", ...)``) or a code comment ``# claim: <id>`` above an
  ``assert``,
- is cited: holds a ``{cite}`` role, or
- is reviewed: an entry of the allow-list (claims_allow.toml) matches it, with a reason.
Digits typed by hand are backed by an assert, a citation or the allow-list, never by a glue beside them.

Prose means text outside code cells, other fences, math, code spans, headings, quoted source text (“...” and
blockquotes) and the references section. Usage:
    python code/booktools/claims_audit.py [--chapters softmax transformer]   # unbacked sentences, exit 1 if any
    python code/booktools/claims_audit.py --lengths [--rev HEAD]            # main-text characters per chapter
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "chapters"
ALLOW = Path(__file__).with_name("claims_allow.toml")
SKIP_PAGES = {"bibliography"}               # a generated list of references
# Reasons in the allow-list start with one of these words, so a reader of the list knows what kind of review it was.
REASON_KINDS = ("definition", "setup", "closed form", "exact", "history", "source", "structure", "hedge",
                "example", "shown", "soft", "pointer", "question")

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(?:\{([^}]*)\})?\s*(.*)$")
PROSE_DIRECTIVES = {"admonition", "note", "warning", "tip", "important", "caution", "attention", "hint",
                    "seealso", "dropdown", "exercise", "solution", "glossary", "figure", "epigraph", "topic",
                    "sidebar", "margin", "div", "card"}
COLLAPSED = {"dropdown", "toggle", "exercise", "solution"}
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
EXERCISE_HEADING = re.compile(r"练习|习题")
REFERENCE_HEADING = re.compile(r"参考文献|延伸阅读")
CLAIM_MARKER = re.compile(r"^%\s*claim:\s*(.+?)\s*$")
CODE_CLAIM = re.compile(r"#\s*claim:\s*(.+?)\s*$", re.M)
CHECK_CALL = re.compile(r"""\bcheck\(\s*(?:f?)(["'])(.+?)\1""")

ROLE = re.compile(r"\{([\w:.-]+)\}`([^`]*)`")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_MATH = re.compile(r"\$\$?[^$]+?\$\$?")
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
QUOTED = re.compile(r"“[^”]*”|「[^」]*」|\"[^\"]*\"")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
SENTENCE_END = re.compile(r"(?<=[。！？])|(?<=[.?!])\s+(?=[A-Z])")

TRIGGERS = {
    "digit": re.compile(r"[0-9０-９]"),
    "comparison": re.compile(
        r"(?<!变)更(?!新|改|换|正|替|迭)[\u4e00-\u9fff]|高于|低于|大于|小于|多于|少于|优于|劣于|不如|胜过|超过|领先|落后"
        r"|(?<![对类无可])比(?![如方喻较例值率特赛照重起肩拟对])|倍|远(?=[大小高低多少超快慢胜不比])|远远"
        r"|\b(?:faster|slower|better|worse|more than|less than|fewer|larger|smaller|higher|lower|outperforms?)\b"),
    "superlative": re.compile(
        r"(?<!取)最(?!终|后|初|近邻|大值|小值|大化|小化|大池化|大似然|大长度|优化|小二乘)[\u4e00-\u9fff]"
        r"|\b(?:best|worst|fastest|slowest|most|least)\b"),
    "hedge": re.compile(r"几乎|明显|显著|大约|约(?!定|束|简|等于号)|左右(?![两边侧])|接近|至少|至多|大幅"),
}


@dataclass
class Block:
    """Consecutive prose lines (a paragraph, a list, a table) and where they sit."""
    chapter: str
    lines: list[tuple[int, str]] = field(default_factory=list)
    collapsed: bool = False      # inside a dropdown/exercise/solution or the exercises section
    markers: list[str] = field(default_factory=list)


@dataclass
class Sentence:
    chapter: str
    line: int
    text: str                    # as written
    plain: str                   # roles, math, code, links and quotes reduced to placeholders
    markers: list[str]


def parse(chapter: str, text: str) -> tuple[list[Block], str, list[int]]:
    """Prose blocks of a MyST page, the source of its code cells (for claim ids), and the lines of
    '% claim:' markers that follow no paragraph."""
    lines = text.splitlines()
    i = 0
    if lines and lines[0].strip() == "---":                  # front matter
        i = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), 0) + 1
    blocks: list[Block] = []
    code: list[str] = []
    orphans: list[int] = []
    stack: list[tuple[str, bool, bool]] = []                # (closing fence, prose?, collapsed?)
    section_collapsed = section_skipped = False
    section_level = 0
    in_math = False
    options = False
    current: Block | None = None
    target: Block | None = None                              # the paragraph a '% claim:' line attaches to

    def close():
        nonlocal current
        if current is not None and current.lines:
            blocks.append(current)
        current = None

    for n in range(i, len(lines)):
        line, lineno = lines[n], n + 1
        stripped = line.strip()
        if not CLAIM_MARKER.match(stripped):
            target = None
        if stack and re.fullmatch(re.escape(stack[-1][0][0]) + "{%d,}" % len(stack[-1][0]), stripped):
            stack.pop()
            close()
            continue
        inside_code = bool(stack) and not stack[-1][1]
        if inside_code:
            if stack[-1][0].startswith("`"):
                code.append(line)
            continue
        m = FENCE.match(line)
        if m and not in_math:
            close()
            name = (m.group(3) or "").strip()
            prose = name in PROSE_DIRECTIVES
            collapsed = name in COLLAPSED or (bool(stack) and stack[-1][2])
            stack.append((m.group(2), prose, collapsed))
            options = prose
            if name.startswith("code-cell"):
                code.append("")
            continue
        if options and re.match(r"^\s*:[\w-]+:", line):
            if re.match(r"^\s*:class:.*\bdropdown\b", line):
                stack[-1] = (stack[-1][0], True, True)
            continue
        options = False
        if stripped.startswith("$$"):
            close()
            if not (len(stripped) > 2 and stripped.endswith("$$") and stripped != "$$"):
                in_math = not in_math
            continue
        if in_math:
            continue
        if not stack:
            h = HEADING.match(line)
            if h:
                close()
                level = len(h.group(1))
                if level <= section_level or not (section_collapsed or section_skipped):
                    section_collapsed = bool(EXERCISE_HEADING.search(h.group(2))) and level >= 2
                    section_skipped = bool(REFERENCE_HEADING.search(h.group(2)))
                    section_level = level if (section_collapsed or section_skipped) else 0
                continue
        marker = CLAIM_MARKER.match(stripped)
        if marker:
            if current is not None:                          # a marker ends the paragraph it follows
                target = current
                close()
            if target is None:
                orphans.append(lineno)
            else:
                target.markers.append(marker.group(1))
            continue
        if not stripped:
            close()
            continue
        if stripped.startswith("%") or re.fullmatch(r"\([\w:.-]+\)=", stripped) or re.fullmatch(r"\|?[\s:|-]+\|?", stripped):
            if not stripped.startswith("%"):
                close()
            continue
        if section_skipped or stripped.startswith(">"):            # references; a quoted source (blockquote)
            if stripped.startswith(">"):
                close()
            continue
        if current is None:
            current = Block(chapter, collapsed=section_collapsed or any(s[2] for s in stack))
        current.lines.append((lineno, line))
    close()
    return blocks, "\n".join(code), orphans


def plain(text: str) -> str:
    """Text with what is not prose replaced by placeholders."""
    def role(m):
        name, body = m.group(1), m.group(2)
        if name.startswith("glue"):
            return "⟨glue⟩"
        if name.startswith("cite"):
            return "⟨cite⟩"
        if name == "term":
            return re.sub(r"\s*<[^>]*>$", "", body)
        return "⟨ref⟩"
    text = ROLE.sub(role, text)
    text = CODE_SPAN.sub("⟨code⟩", text)
    text = INLINE_MATH.sub("⟨math⟩", text)
    text = LINK.sub(lambda m: m.group(1), text)
    text = re.sub(r"<[^>]+>", "", text)                     # inline HTML
    return QUOTED.sub("⟨quote⟩", text).replace("**", "")


def sentences(block: Block) -> list[Sentence]:
    """Split a block at 。！？ (and '. ' before a capital), at list items and at table rows."""
    pieces: list[tuple[int, str]] = []                      # (line, text) runs that may not be joined
    for lineno, line in block.lines:
        new_run = not pieces or LIST_ITEM.match(line) or line.lstrip().startswith("|")
        if new_run:
            pieces.append((lineno, line.strip()))
        else:
            prev_line, prev = pieces[-1]
            sep = " " if re.search(r"[\x21-\x7e]$", prev) and re.match(r"[\x21-\x7e]", line.strip()) else ""
            pieces[-1] = (prev_line, prev + sep + line.strip())
    out = []
    for lineno, run in pieces:
        for part in SENTENCE_END.split(run):
            if part and part.strip():
                out.append(Sentence(block.chapter, lineno, part.strip(), plain(LIST_ITEM.sub("", part)), block.markers))
    return out


def load_allow(path: Path = ALLOW) -> tuple[dict, dict]:
    """(patterns: regex -> reason, sentences: chapter -> {fragment: reason}) from the allow-list."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    patterns = data.pop("patterns", {})
    return patterns, data


def reason_problem(reason: str) -> str | None:
    if not isinstance(reason, str) or not reason.strip():
        return "no reason"
    kind = reason.split(":", 1)[0].strip()
    if kind not in REASON_KINDS or len(reason.split(":", 1)[-1].strip()) < 8:
        return f"reason must be '<kind>: <why>' with kind in {REASON_KINDS}"
    return None


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def claim_ids(code: str) -> list[str]:
    return [m.group(2) for m in CHECK_CALL.finditer(code)] + CODE_CLAIM.findall(code)


@dataclass
class Finding:
    chapter: str
    line: int
    triggers: list[str]
    text: str
    problem: str = "unbacked"

    def __str__(self):
        return f"{self.chapter}.md:{self.line}: [{self.problem}: {', '.join(self.triggers)}] {self.text}"


def chapter_names() -> list[str]:
    return sorted(p.stem for p in CHAPTERS.glob("*.md") if p.stem not in SKIP_PAGES)


def audit_text(chapter: str, text: str, patterns: dict, allowed: dict) -> tuple[list[Finding], set[str]]:
    """Findings for one page and the allow-list fragments it used."""
    blocks, code, orphans = parse(chapter, text)
    ids = claim_ids(code)
    findings = [Finding(chapter, n, ["% claim:"], "", "a claim marker must directly follow its paragraph")
                for n in orphans]
    used = set()
    for block in blocks:
        for marker in block.markers:
            if not any(c.startswith(marker) or c == marker for c in ids):
                findings.append(Finding(chapter, block.lines[0][0], [marker], "% claim: " + marker,
                                        "claim id matches no check()/# claim: in this chapter"))
        for s in sentences(block):
            body = s.plain
            for pattern in patterns:
                body = re.sub(pattern, "⟨ok⟩", body)
            hits = [name for name, rx in TRIGGERS.items() if rx.search(body)]
            if not hits:
                continue
            frags = [f for f in allowed if squash(f) in squash(s.text)]
            used.update(frags)
            if frags or s.markers or "⟨cite⟩" in body:
                continue
            if "⟨glue⟩" in body and "digit" not in hits:
                continue
            if "⟨glue⟩" in body:
                hits = ["digit typed by hand beside a glue"]
            findings.append(Finding(chapter, s.line, hits, s.text))
    return findings, used


def audit(chapters: list[str] | None = None, allow_path: Path = ALLOW) -> list[Finding]:
    patterns, allow = load_allow(allow_path)
    findings = []
    for pattern, reason in patterns.items():
        if (p := reason_problem(reason)):
            findings.append(Finding("claims_allow", 0, [pattern], reason, p))
    for chapter in chapters or chapter_names():
        allowed = allow.get(chapter, {})
        for frag, reason in allowed.items():
            if (p := reason_problem(reason)):
                findings.append(Finding("claims_allow", 0, [chapter], frag, p))
        found, used = audit_text(chapter, (CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8"),
                                 patterns, allowed)
        findings += found
        findings += [Finding("claims_allow", 0, [chapter], f, "entry matches no sentence (stale)")
                     for f in allowed if f not in used]
    if not chapters:
        findings += [Finding("claims_allow", 0, [c], "", "no such chapter") for c in allow if c not in chapter_names()]
    return findings


def main_text_length(text: str, chapter: str = "") -> int:
    """Characters (no whitespace) of prose outside collapsed blocks, exercises and references."""
    blocks, _, _ = parse(chapter, text)
    return sum(len(squash(line)) for b in blocks if not b.collapsed for _, line in b.lines)


def lengths(rev: str | None = None) -> dict[str, int]:
    out = {}
    for chapter in chapter_names():
        if rev:
            text = subprocess.run(["git", "show", f"{rev}:chapters/{chapter}.md"], cwd=ROOT, capture_output=True,
                                  text=True, check=True).stdout
        else:
            text = (CHAPTERS / f"{chapter}.md").read_text(encoding="utf-8")
        out[chapter] = main_text_length(text, chapter)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chapters", nargs="*", help="chapter names (default: every page but the bibliography)")
    ap.add_argument("--lengths", action="store_true", help="print main-text characters per chapter instead")
    ap.add_argument("--rev", help="with --lengths: read the chapters at this git revision")
    args = ap.parse_args(argv)
    if args.lengths:
        for chapter, n in lengths(args.rev).items():
            print(f"{chapter}\t{n}")
        return 0
    findings = audit(args.chapters)
    for f in findings:
        print(f)
    print(f"{len(findings)} finding(s)", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

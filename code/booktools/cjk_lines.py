"""Sphinx extension: a line break between two Chinese characters in a paragraph's source is dropped.

Markdown keeps a source line break inside a paragraph as a newline, which browsers show as a space; in
Chinese that space is a typo ("查阅源序列。 如今"). Chromium shows it; CSS cannot remove it. This post-transform
(after references and glossary terms are resolved, so their Chinese text counts) deletes each whitespace
run that holds a newline when the characters on both sides are CJK (ideographs, CJK or full-width
punctuation, Chinese quotation marks). The neighbours are looked up across inline nodes, so a line ending
before a role (``…的\\n{term}`词元```) is joined too, as is a space typed between a Chinese character and
a role whose text starts with one (``见 {ref}`…```); text inside code and maths is never changed, and a
break next to Latin text, a number or code keeps its space. Sources stay wrapped as they are.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

# Ideographs (Ext. A, URO, compatibility), CJK symbols and punctuation (、。「」《》…), full-width forms
# (，：；（）！？), and the general punctuation Chinese text uses: ‘ ’ “ ” — …  ·
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef\u2018\u2019\u201c\u201d\u2014\u2026"
CJK_CHAR = re.compile(f"[{CJK}]")
BREAK = re.compile(r"[ \t]*\n\s*")  # a whitespace run that holds a line break
EDGE = re.compile(r"^[ \t]+|[ \t]+$")  # a space typed next to a role or other inline node (见 {ref}`…`)
# Inline nodes whose text is shown verbatim: neighbours for the lookup, never edited.
VERBATIM = (nodes.literal, nodes.math, nodes.raw, nodes.FixedTextElement)


def is_cjk(ch: str) -> bool:
    return bool(ch) and CJK_CHAR.match(ch) is not None


def join_lines(text: str, before: str = "", after: str = "") -> str:
    """``text`` with each line break between two CJK characters removed, and a space at its start or end
    too when it sits between two CJK characters across a node edge (见 {ref}`…`); ``before``/``after`` are
    the characters just outside it (from the neighbouring nodes), '' at the paragraph's edges."""
    def keep(m):
        left = text[m.start() - 1] if m.start() else before
        right = text[m.end()] if m.end() < len(text) else after
        return "" if is_cjk(left) and is_cjk(right) else m.group()
    text = BREAK.sub(keep, text)
    return EDGE.sub(keep, text) if (before or after) else text


def _blocks(doctree):
    """Text elements that hold running text: paragraphs, titles, terms, captions… (not inline or verbatim)."""
    for node in doctree.findall(nodes.TextElement):
        if not isinstance(node, (nodes.Inline, nodes.FixedTextElement)):
            yield node


def join_block(block: nodes.Element) -> int:
    """Join the CJK line breaks of one block in place; returns how many Text nodes changed."""
    found = list(block.findall(nodes.Text))
    texts = [str(t) for t in found]  # (a Node is always true, even an empty Text)
    changed = 0
    for i, t in enumerate(found):
        if not (("\n" in texts[i]) or texts[i][:1].isspace() or texts[i][-1:].isspace()) or _inside(t, VERBATIM, block):
            continue
        before = next((s[-1] for s in reversed(texts[:i]) if s), "")
        after = next((s[0] for s in texts[i + 1:] if s), "")
        new = join_lines(texts[i], before, after)
        if new != texts[i]:
            parent = t.parent  # by identity: Element.replace finds the first *equal* Text ("\n" is common)
            parent[next(k for k, child in enumerate(parent.children) if child is t)] = nodes.Text(new)
            texts[i] = new  # later lookups see the joined text
            changed += 1
    return changed


def _inside(node, kinds, stop) -> bool:
    node = node.parent
    while node is not None and node is not stop:
        if isinstance(node, kinds):
            return True
        node = node.parent
    return isinstance(stop, kinds)


class JoinCJKLines(SphinxPostTransform):
    default_priority = 900  # after ReferencesResolver (10) and myst-nb's glue (< 900)
    formats = ("html",)

    def run(self, **kwargs) -> None:
        for block in list(_blocks(self.document)):
            join_block(block)


def setup(app):
    app.add_post_transform(JoinCJKLines)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

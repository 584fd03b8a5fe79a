"""Sphinx extension: the ``{book-path}`` directive, the landing page's map of the chapters as a learning path.

Each line of the directive's content is ``docname | 先读 (docnames, space-separated, or —) | the chapter's question``.
The table adds two numbers measured at every build, so the page never states a time typed by hand:
reading minutes (CJK characters of the main text, code and collapsed blocks left out, at ``READING_RATE``
characters a minute, rounded up to 5) and the seconds the chapter took to execute in this build (its
provenance record, as on the 构建记录 page).
"""

from __future__ import annotations

import math
from pathlib import Path

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

from generated_pages import mark_regenerated
from main_text import CJK, main_text
from provenance_page import chapter_record, table_frame

READING_RATE = 300      # CJK characters a minute: a careful reading of technical prose, a stated estimate
HEADERS = ("章节", "回答的问题", "先读", "阅读（分钟）", "运行（秒）")


def reading_minutes(source: str) -> int:
    """Minutes to read a chapter's main text at READING_RATE, rounded up to a multiple of 5."""
    return 5 * math.ceil(len(CJK.findall(main_text(source))) / READING_RATE / 5)


def parse(lines: list[str]) -> list[tuple[str, list[str], str]]:
    """``docname | prerequisites | question`` lines -> (docname, [prerequisite docnames], question)."""
    out = []
    for line in filter(str.strip, lines):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3:
            raise ValueError(f"book-path: expected 'docname | 先读 | 问题', got {line!r}")
        before = [] if parts[1] in ("", "—", "-") else parts[1].split()
        out.append((parts[0], before, parts[2]))
    return out


class PathNode(nodes.General, nodes.Element):
    """Placeholder replaced by the table once every chapter has executed."""


class PathDirective(SphinxDirective):
    has_content = True

    def run(self):
        mark_regenerated(self.env)
        node = PathNode()
        node["rows"] = parse(list(self.content))
        for docname, before, _ in node["rows"]:
            for doc in [docname, *before]:
                if not (Path(self.env.srcdir) / f"chapters/{doc}.md").exists():
                    raise self.error(f"book-path: no chapter chapters/{doc}.md")
        return [node]


class PathPostTransform(SphinxPostTransform):
    default_priority = 8  # before references are resolved

    def link(self, docname: str) -> nodes.Node:
        ref = pending_xref(refdoc=self.env.docname, reftarget=f"/chapters/{docname}", reftype="doc",
                           refdomain="std", refexplicit=False, refwarn=True)
        ref += nodes.inline(text=docname)
        return ref

    def run(self, **kwargs):
        for node in list(self.document.findall(PathNode)):
            node.replace_self(self.table(node["rows"]))

    def table(self, rows) -> nodes.table:
        srcdir, outdir = Path(self.env.srcdir), Path(self.app.outdir)
        table, body = table_frame(HEADERS, "attnbook-path-table")
        for docname, before, question in rows:
            source = (srcdir / f"chapters/{docname}.md").read_text(encoding="utf-8")
            seconds = (chapter_record(outdir, f"chapters/{docname}") or {}).get("seconds")
            prereq = nodes.paragraph()
            for i, doc in enumerate(before):
                prereq += [nodes.Text("、")] if i else []
                prereq += self.link(doc)
            if not before:
                prereq += nodes.Text("—")
            cells = [nodes.paragraph("", "", self.link(docname)), nodes.paragraph(text=question), prereq,
                     nodes.paragraph(text=str(reading_minutes(source))),
                     nodes.paragraph(text="-" if seconds is None else f"{seconds:.0f}")]
            body += nodes.row("", *[nodes.entry("", c) for c in cells])
        return table


def setup(app):
    app.add_node(PathNode)
    app.add_directive("book-path", PathDirective)
    app.add_post_transform(PathPostTransform)
    app.setup_extension("generated_pages")   # re-read on every build: chapters change and re-execute
    return {"parallel_read_safe": True, "parallel_write_safe": True}

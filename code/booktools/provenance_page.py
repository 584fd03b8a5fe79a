"""Sphinx extension: the ``{book-provenance}`` directive, a table of how each chapter was executed.

Each chapter ends with ``attnbook.provenance()``, whose HTML carries a JSON record in ``data-record``
(torch version, device, seconds, date). After every chapter has executed, the placeholder becomes a table
built from those records and from myst-nb's own execution data; a chapter whose run time exceeds the
``budget_seconds`` of its front matter is marked. The page is re-read on every build.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from docutils import nodes
from myst_nb.sphinx_ import NbMetadataCollector
from sphinx.addnodes import pending_xref
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

from generated_pages import mark_regenerated

RECORD = re.compile(r'class="attnbook-provenance" data-record="([^"]*)"')  # attnbook/book.py
HEADERS = ("章节", "执行用时 (s)", "预算 (s)", "设备", "torch", "日期", "状态")


class ProvenanceNode(nodes.General, nodes.Element):
    """Placeholder replaced by the table once all chapters have executed."""


class ProvenanceDirective(SphinxDirective):
    def run(self):
        mark_regenerated(self.env)
        return [ProvenanceNode()]


def chapter_record(outdir: Path, docname: str) -> dict | None:
    """The provenance JSON a chapter displayed, from its executed notebook in _build/jupyter_execute."""
    path = outdir.parent / "jupyter_execute" / f"{docname}.ipynb"  # myst-nb writes them beside html/
    if not path.exists():
        return None
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            found = RECORD.search("".join(output.get("data", {}).get("text/html", "")))
            if found:
                return json.loads(html.unescape(found.group(1)))
    return None


def rows(app, env) -> list[dict]:
    out = []
    for docname in env.found_docs:
        if docname not in env.all_docs or "kernelspec" not in env.metadata.get(docname, {}):
            continue
        record = chapter_record(Path(app.outdir), docname) or {}
        exec_data = NbMetadataCollector.get_doc_data(env).get(docname, {}).get("exec_data") or {}
        budget = env.metadata[docname].get("budget_seconds")
        seconds = record.get("seconds")
        over = seconds is not None and budget is not None and seconds > float(budget)
        ok = exec_data.get("succeeded", record != {})
        out.append(dict(docname=docname, seconds=seconds, budget=budget, device=record.get("device", "?"),
                        torch=record.get("torch_version", "?"), date=record.get("date", "?"),
                        status="超出预算" if over else ("✅" if ok else "❌")))
    order = {doc: i for i, doc in enumerate(env.toctree_includes.get(env.config.root_doc, []))}
    return sorted(out, key=lambda r: (order.get(r["docname"], len(order)), r["docname"]))


def table_frame(headers, css_class: str) -> tuple[nodes.table, nodes.tbody]:
    """An empty docutils table with one header row; the caller appends rows to the returned body."""
    table = nodes.table(classes=["colwidths-auto", css_class])
    group = nodes.tgroup(cols=len(headers))
    table += group
    group += [nodes.colspec(colwidth=1) for _ in headers]
    head, body = nodes.thead(), nodes.tbody()
    group += [head, body]
    head += nodes.row("", *[nodes.entry("", nodes.paragraph(text=h)) for h in headers])
    return table, body


class ProvenancePostTransform(SphinxPostTransform):
    default_priority = 8  # before references are resolved

    def run(self, **kwargs):
        for node in list(self.document.findall(ProvenanceNode)):
            node.replace_self(self.table(rows(self.app, self.env)))

    def table(self, data: list[dict]) -> nodes.table:
        table, body = table_frame(HEADERS, "attnbook-provenance-table")
        for r in data:
            link = pending_xref(refdoc=self.env.docname, reftarget="/" + r["docname"], reftype="doc",
                                refdomain="std", refexplicit=False, refwarn=True)
            link += nodes.inline(text=r["docname"])
            cells = [nodes.paragraph("", "", link)] + [nodes.paragraph(text=t) for t in (
                "-" if r["seconds"] is None else f"{r['seconds']:.1f}",
                "-" if r["budget"] is None else str(r["budget"]),
                r["device"], r["torch"], r["date"], r["status"])]
            body += nodes.row("", *[nodes.entry("", c) for c in cells])
        return table


def setup(app):
    app.add_node(ProvenanceNode)
    app.add_directive("book-provenance", ProvenanceDirective)
    app.add_post_transform(ProvenancePostTransform)
    app.setup_extension("generated_pages")   # re-read this page on every build
    return {"parallel_read_safe": True, "parallel_write_safe": True}

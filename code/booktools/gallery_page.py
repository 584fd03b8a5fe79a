"""Sphinx extension: the ``{book-gallery}`` directive, every figure and widget of the book on one page.

While each chapter is read, its images (the figures its cells drew) and its static widgets (the
``data-widget`` marker of ``attnbook.widgets.static``) are recorded with the section they sit in.
After all chapters are read, the placeholder becomes, per chapter in reading order, a grid of
thumbnails and a list of widgets, each linking to its section. The page is re-read on every build.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

from generated_pages import mark_regenerated

WIDGET = re.compile(r'class="attnbook-static-widget" data-widget="([^"]+)" data-title="([^"]*)"')  # widgets/static.py
STYLE = """<style>
.attnbook-gallery-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(180px, 1fr)); gap: 1rem; }
.attnbook-gallery-grid p { margin: 0; font-size: 0.85em; }
.attnbook-gallery-grid img { width: 100%; height: 130px; object-fit: contain; border: 1px solid #ddd; }
</style>"""


class GalleryNode(nodes.General, nodes.Element):
    """Placeholder replaced once every chapter has been read."""


class GalleryDirective(SphinxDirective):
    def run(self):
        mark_regenerated(self.env)
        return [GalleryNode()]


def _section(node: nodes.Node) -> tuple[str, list[tuple[str, str]]]:
    """(anchor id, title) of the innermost section holding ``node``; the title as (kind, text) parts, where
    kind "math" keeps inline maths as TeX for MathJax (astext() alone would show the reader \\sqrt{d_k})."""
    while node is not None and not isinstance(node, nodes.section):
        node = node.parent
    if node is None:
        return "", []
    return node["ids"][0], [("math" if isinstance(part, nodes.math) else "text", part.astext()) for part in node[0]]


def _title_nodes(parts: list[tuple[str, str]]) -> list[nodes.Node]:
    return [nodes.math(text=text) if kind == "math" else nodes.Text(text) for kind, text in parts]


def collect(app, doctree: nodes.document) -> None:
    """Record the figures and widgets of a notebook chapter, in document order."""
    env = app.env
    items = []
    if "kernelspec" in env.metadata.get(env.docname, {}):
        for node in doctree.findall(lambda n: isinstance(n, (nodes.image, nodes.raw))):
            if isinstance(node, nodes.image):
                items.append(dict(kind="figure", uri=node["candidates"].get("*", node["uri"]),
                                  section=_section(node)))
            else:
                items += [dict(kind="widget", name=name, title=title, section=_section(node))
                          for name, title in WIDGET.findall(node.astext())]
    if not hasattr(env, "attnbook_gallery"):
        env.attnbook_gallery = {}
    env.attnbook_gallery[env.docname] = items
    if any(doctree.findall(GalleryNode)):   # section titles with maths appear there: load MathJax on the page
        env.get_domain("math").data["has_equations"][env.docname] = True


def purge(app, env, docname):
    getattr(env, "attnbook_gallery", {}).pop(docname, None)


def merge(app, env, docnames, other):
    env.attnbook_gallery = getattr(env, "attnbook_gallery", {})
    env.attnbook_gallery.update({d: other.attnbook_gallery[d] for d in docnames
                                 if d in getattr(other, "attnbook_gallery", {})})


class GalleryPostTransform(SphinxPostTransform):
    default_priority = 8

    def run(self, **kwargs):
        for node in list(self.document.findall(GalleryNode)):
            node.replace_self(self.gallery())

    def link(self, docname: str, anchor: str, *children) -> nodes.reference:
        uri = self.app.builder.get_relative_uri(self.env.docname, docname) + (f"#{anchor}" if anchor else "")
        return nodes.reference("", "", *children, refuri=uri, internal=True)

    def gallery(self) -> list[nodes.Node]:
        out = [nodes.raw("", STYLE, format="html")]
        collected = getattr(self.env, "attnbook_gallery", {})
        order = self.env.toctree_includes.get(self.env.config.root_doc, [])
        chapters = [d for d in sorted(collected, key=lambda d: (order.index(d) if d in order else len(order), d))
                    if collected[d]]
        titles = {}
        for docname in chapters:
            number = self.env.toc_secnumbers.get(docname, {}).get("")   # e.g. (3,) for chapter 3
            titles[docname] = (f"{'.'.join(map(str, number))}. " if number else "") + self.env.titles[docname].astext()
        jump = nodes.paragraph("", "", nodes.Text("跳到："))      # the chapters are rubrics, not in the page's contents
        for k, docname in enumerate(chapters):
            jump += [nodes.Text("　") if k else nodes.Text(""),
                     self.link(self.env.docname, self.anchor(docname), nodes.Text(titles[docname]))]
        out.append(jump)
        for docname in chapters:
            items, title = collected[docname], titles[docname]
            figures = [i for i in items if i["kind"] == "figure"]
            widgets = [i for i in items if i["kind"] == "widget"]
            out.append(nodes.rubric("", "", self.link(docname, "", nodes.Text(title)), ids=[self.anchor(docname)]))
            counts = [f"{len(figures)} 幅图" if figures else "", f"{len(widgets)} 个交互图" if widgets else ""]
            out.append(nodes.paragraph(text="，".join(c for c in counts if c)))
            if widgets:
                bullets = nodes.bullet_list()
                for w in widgets:
                    anchor, section = w["section"]
                    bullets += nodes.list_item("", nodes.paragraph(
                        "", "", nodes.Text(f"交互图「{w['title']}」（"), nodes.literal(text=w["name"]), nodes.Text("）：见 "),
                        self.link(docname, anchor, nodes.Text("§ "), *_title_nodes(section))))
                out.append(bullets)
            grid = nodes.container(classes=["attnbook-gallery-grid"])
            for k, f in enumerate(figures, 1):
                anchor, section = f["section"]
                image = nodes.image(uri=f["uri"], candidates={"*": f["uri"]}, alt=f"{title}，图 {k}")
                grid += nodes.container("", nodes.paragraph("", "", self.link(docname, anchor, image)),
                                        nodes.paragraph("", "", self.link(docname, anchor, nodes.Text(f"图 {k} · "),
                                                                          *_title_nodes(section))))
            if figures:
                out.append(grid)
        return out

    @staticmethod
    def anchor(docname: str) -> str:
        """The id of a chapter's heading on this page."""
        return "gallery-" + docname.replace("/", "-")


def setup(app):
    app.add_node(GalleryNode)
    app.add_directive("book-gallery", GalleryDirective)
    app.add_post_transform(GalleryPostTransform)
    app.connect("doctree-read", collect)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.setup_extension("generated_pages")   # re-read this page on every build
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 3}

"""Sphinx extension: pages generated from the other pages (provenance table, gallery) are re-read on
every build, since any chapter may have changed or re-executed since they were last read.

A directive that builds such a page calls :func:`mark_regenerated`; extensions that define one load
this module with ``app.setup_extension("generated_pages")``.
"""

from __future__ import annotations

from myst_nb.sphinx_ import NbMetadataCollector

MARK = "regenerated_every_build"


def mark_regenerated(env) -> None:
    """Mark the page being read as one to re-read on every build."""
    NbMetadataCollector.set_doc_data(env, env.docname, MARK, True)


def always_reread(app, env, added, changed, removed):
    return [doc for doc, data in NbMetadataCollector.get_doc_data(env).items() if data.get(MARK)]


def setup(app):
    app.connect("env-get-outdated", always_reread)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}

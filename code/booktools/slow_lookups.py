"""Sphinx extension: two third-party lookups that took almost half of the book's Sphinx time
(a warm HTML build: 68 s with them, 37 s without; the seconds below are from cProfile).

- Sphinx 7.4's Chinese search (``sphinx.search.zh.SearchChinese``) appends every Latin word it meets to a
  class-level *list* and tests each word it stems for membership in it: quadratic in the book's length
  (27 s). A set answers the same question in constant time.
- sphinxcontrib-bibtex asks pybtex for its plain-text backend on every citation it resolves, and pybtex scans
  every installed package's entry points each time (about 30 ms a citation, 9 s for the book). pybtex looks
  in its runtime registry first, so registering the backend once answers every later lookup from there.

Neither changes what is built: ``tests/test_slow_lookups.py`` checks both against the originals.
"""

from __future__ import annotations

import pybtex.plugin
from sphinx.search import zh


class TermSet(set):
    """The set ``SearchChinese.latin_terms`` becomes: ``in`` as before, and the one ``extend`` Sphinx calls."""

    def extend(self, terms) -> None:
        self.update(terms)


def setup(app):
    if not isinstance(zh.SearchChinese.latin_terms, TermSet):
        zh.SearchChinese.latin_terms = TermSet(zh.SearchChinese.latin_terms)
    group, name = "pybtex.backends", "plaintext"
    pybtex.plugin.register_plugin(group, name, pybtex.plugin.find_plugin(group, name), force=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Sphinx extension: a search page that finds the book's Chinese terms.

Sphinx's Chinese search indexes Chinese text only when ``jieba`` is installed, and jieba splits a compound it
does not know (束搜索 -> 束 / 搜索), while the search page looks a typed word up whole. So every Chinese term of
the glossary goes into jieba's user dictionary (``html_search_options["dict"]``): the index then holds each
term as one word, and jieba's search mode still indexes its parts (位置编码 -> 位置, 编码, 位置编码).
"""

from __future__ import annotations

import re
from pathlib import Path

GLOSSARY = Path("chapters") / "glossary.md"
CJK = re.compile(r"[\u4e00-\u9fff]")


def glossary_terms(text: str) -> list[str]:
    """The term lines of every ``{glossary}`` block that contain Chinese, spaces removed (jieba words have none)."""
    terms = []
    for block in re.findall(r"^```\{glossary\}\n(.*?)^```", text, re.M | re.S):
        for line in block.splitlines():
            if line and not line[0].isspace() and CJK.search(line):
                terms.append(re.sub(r"\s+", "", line))
    return list(dict.fromkeys(terms))


def use_glossary_dictionary(app) -> None:
    app.attnbook_search_terms = glossary_terms((Path(app.srcdir) / GLOSSARY).read_text(encoding="utf-8"))
    path = Path(app.outdir).parent / "search-terms.txt"   # beside html/, not published
    path.write_text("".join(f"{t}\n" for t in app.attnbook_search_terms), encoding="utf-8")
    app.config.html_search_options = {**(app.config.html_search_options or {}), "dict": str(path)}


def reindex_when_terms_change(app, env, added, changed, removed) -> list[str]:
    """Every page's index entries were cut with the old dictionary: read them all again (from the cache)."""
    if getattr(env, "attnbook_search_terms", None) == app.attnbook_search_terms:
        return []
    env.attnbook_search_terms = app.attnbook_search_terms
    return sorted(env.found_docs - set(added) - set(changed) - set(removed))


def setup(app):
    app.connect("builder-inited", use_glossary_dictionary)
    app.connect("env-get-outdated", reindex_when_terms_change)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

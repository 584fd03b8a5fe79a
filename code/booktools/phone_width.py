"""Sphinx extension: the book's own style sheet for phone-width screens (``static/attnbook-phone.css``).

At 390 px wide, long inline code, wide tables, display maths and widgets would push the page wider than
the screen; the sheet makes them wrap or scroll inside their own box. It is copied into ``_static`` of
the build and linked from every page (no CDN: the book works offline). ``tests/test_browser_phone.py``
opens every page at 390 px.
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).parent / "static"
SHEET = "attnbook-phone.css"


def _add_static(app, config) -> None:
    config.html_static_path = [*config.html_static_path, str(STATIC)]


def setup(app):
    app.connect("config-inited", _add_static)
    app.add_css_file(SHEET)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Sphinx extension (local to this book): make the HTML work offline and point Colab at notebooks.

- MathJax 3 is copied from the installed ``mathjax`` package (PyPI: django-static-mathjax) into
  ``_static/mathjax`` of the output and loaded from there, never from a CDN.
- sphinx-thebe, which Jupyter Book always loads, is dropped from every page: we do not use thebe,
  and its inline ``const THEBE_JS_URL`` is declared twice on a page (a console error).
- myst-nb's ``application/vnd.jupyter.widget-state+json`` script is dropped too: only the CDN widget
  manager (which the book does not load) reads it, and the static widgets carry their own state
  (over 100 KB of dead JSON on the multi-head page).
- A widget whose synced state holds ``weights`` and ``weights_file`` (``attnbook.GptChatWidget``) gets that file
  written beside its page, from the executed notebook's widget state (so a cached chapter writes it too): the page
  loads it with ``<script src>``; it is the text ``attnbook.gpt_export.weights_script`` gives (the build does not
  import torch; tests/test_gpt_chat_book.py checks the two agree).
- ``/favicon.ico`` is written at the site root, where browsers look for it on every page.
- The Colab and Binder launch buttons open the generated notebook (``make notebooks``: the build's numbers filled
  in, solutions folded) on the branch named by ``attnbook_notebooks_branch``, not the MyST ``.md`` source; Binder
  builds that branch's ``binder/`` (the book's environment, attnbook pinned to the build's commit).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MATHJAX_DIRS = ("input", "output/chtml", "a11y", "ui", "adaptors", "sre")  # what tex-chtml.js may load
MATHJAX_ENTRY = "tex-chtml.js"


def _mathjax_source() -> Path:
    import mathjax  # shipped by django-static-mathjax

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    src, dst = _mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / MATHJAX_ENTRY, dst / MATHJAX_ENTRY)
    for sub in MATHJAX_DIRS:
        shutil.copytree(src / sub, dst / sub, dirs_exist_ok=True)


def _write_favicon(app, exception):
    """/favicon.ico: browsers request it from the site root (e.g. on Jupyter Book's redirect page)."""
    if exception is not None or app.builder.format != "html":
        return
    from PIL import Image, ImageDraw  # Pillow comes with matplotlib

    icon = Image.new("RGBA", (32, 32), (59, 110, 165, 255))  # the colours of chapters/images/favicon.svg
    draw = ImageDraw.Draw(icon)
    for x, top in ((6, 18), (13, 8), (21, 14)):
        draw.rectangle((x, top, x + 4, 26), fill="white")
    icon.save(Path(app.outdir) / "favicon.ico")


def _is_thebe(js) -> bool:
    name = str(getattr(js, "filename", js) or "")
    body = getattr(js, "attributes", {}).get("body", "") or ""
    return "thebe" in name.lower() or "THEBE_JS_URL" in body


def _is_widget_state(js) -> bool:
    return getattr(js, "attributes", {}).get("type") == "application/vnd.jupyter.widget-state+json"


def _write_weight_files(app, pagename, js) -> None:
    """Each widget's ``weights`` as ``globalThis.attnbookGptWeights[weights_file]``, in the page's folder."""
    for model in json.loads(js.attributes["body"]).get("state", {}).values():
        state = model.get("state", {})
        name, weights = state.get("weights_file"), state.get("weights")
        if name and weights:
            path = Path(app.outdir) / Path(pagename).parent / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"(globalThis.attnbookGptWeights ||= {{}})[{json.dumps(name)}] = "
                            f"{json.dumps(weights, ensure_ascii=False)};\n", encoding="utf-8")


def _strip_unused_scripts(app, pagename, templatename, context, doctree):
    if "script_files" in context:
        for js in context["script_files"]:
            if _is_widget_state(js) and app.builder.format == "html":
                _write_weight_files(app, pagename, js)
        context["script_files"] = [js for js in context["script_files"]
                                   if not (_is_thebe(js) or _is_widget_state(js))]


def _launch_notebooks(app, pagename, templatename, context, doctree):
    branch = app.config.attnbook_notebooks_branch
    if not branch:
        return
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            url = button.get("url", "")
            if "colab.research.google.com" in url:
                head, _, tail = url.partition("/blob/")
                path = tail.split("/", 1)[1] if "/" in tail else tail
                button["url"] = f"{head}/blob/{branch}/{Path(path).with_suffix('.ipynb')}"
            elif "/v2/gh/" in url and "urlpath=" in url:   # Binder: .../v2/gh/OWNER/REPO/BRANCH?urlpath=lab/tree/PATH
                head, _, query = url.partition("?")
                repo, path = head.rpartition("/")[0], query.split("/tree/", 1)[1]
                button["url"] = f"{repo}/{branch}?urlpath=lab/tree/{Path(path).with_suffix('.ipynb')}"


def _set_mathjax_path(app, config):
    config.mathjax_path = f"mathjax/{MATHJAX_ENTRY}"  # relative to _static/


def setup(app):
    app.add_config_value("attnbook_notebooks_branch", "", "html")
    app.connect("config-inited", _set_mathjax_path, priority=900)
    app.connect("html-page-context", _strip_unused_scripts, priority=900)
    app.connect("html-page-context", _launch_notebooks, priority=900)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _write_favicon)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

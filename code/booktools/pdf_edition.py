"""The book as one PDF (``make pdf``): Chromium prints a single-page build made from the executed book.

Why this route: the web edition's figures, widgets (their static pictures), code outputs and MathJax maths are
printed exactly as a reader sees them, with the CJK fonts the HTML already uses; a LaTeX route would re-render
every output through another toolchain (and XeLaTeX with CJK fonts is a 1 GB Debian install).

1. ``jupyter-book build --builder singlehtml`` reads every chapter from the execution cache (no chapter runs
   again after ``make book``). As a Sphinx extension this module gives ``singlehtml`` the writers that
   myst-nb and sphinx-jupyterbook-latex register for ``html`` only; the widgets' element ids, numbered per
   chapter, are renumbered across the page.
2. ``main()`` serves that page on 127.0.0.1, waits for MathJax and the widgets' static pictures, rearranges it
   for print (a title page with the commit, the root page as 关于本书, parts / chapters / sections as h1 / h2 / h3
   so the PDF outline has bookmarks for each, collapsed blocks opened, a note under each widget) and prints it
   to A4 with page numbers.
3. ``pdf_text.fix_pdf`` rewrites the character maps in which Chromium names a radical (⼒ U+2F12) for an
   ideograph sharing its glyph (力), so that the text a reader searches and copies is the page's;
   ``pdf_text.fix_outline`` writes once the bookmark titles Chromium wrote twice ("1.7. 1.7. 练习练习").
"""

from __future__ import annotations

import argparse
import datetime
import functools
import http.server
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pdf_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SINGLE = ROOT / "_build" / "singlehtml"
OUT = ROOT / "_build" / "pdf"
NAME = "attention-book.pdf"
PRINT_WIDTH_PX = 680  # A4 less 2 x 15 mm margins, at 96 px per inch
PREFACE_TITLE = "关于本书"  # the root page (chapters/index.md), whose own title is the book's
WIDGET_NOTE = "（交互图：网页版中可以拖动或点选；这里印的是它的初始状态。）"

PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm 15mm; }
html, body { background: white !important; }
.bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .header-article, .bd-footer, .bd-footer-article,
.prev-next-area, .headerlink, .toggle-button, button.toggle-button, .copybtn, .bd-header-announcement,
.search-button-field, #pst-back-to-top, .skip-link, .pdf-hide { display: none !important; }
.bd-main, .bd-content, .bd-article-container, .bd-article, .bd-page-width, .bd-container, .bd-container__inner
  { max-width: none !important; width: auto !important; padding: 0 !important; margin: 0 !important; display: block !important; }
body { font-size: 10.5pt; }
pre, pre span { white-space: pre-wrap !important; overflow-wrap: anywhere; }  /* break at spaces, inside a word only when it must */
pre { font-size: 8pt; overflow: visible !important; max-height: none !important; }
code { overflow-wrap: anywhere; white-space: normal; }
img { max-width: 100% !important; height: auto !important; break-inside: avoid; }
table { max-width: 100%; table-layout: auto; font-size: 8.5pt; word-break: break-word; }
.cell_output, .output { overflow: visible !important; max-height: none !important; }
.toggle-hidden, .toggle-details__container, details > * { display: block !important; visibility: visible !important;
  height: auto !important; opacity: 1 !important; }
.attnbook-static-widget { break-inside: avoid; max-width: 100%; overflow: hidden; }
#jb-print-docs-body { display: none !important; }  /* the theme's own print header */
.bd-article h1 { display: block !important; }  /* the theme hides an article's first h1 in print */
.pdf-title { height: 240mm; display: flex; flex-direction: column; justify-content: center; text-align: center; }
.pdf-title h1 { font-size: 26pt; border: none; }
.pdf-title p { font-size: 11pt; color: #444; margin: 2mm 0; }
.pdf-part { break-before: page; padding-top: 80mm; text-align: center; font-size: 24pt; border: none; }
.pdf-chapter { break-before: page; }
.pdf-note { font-size: 9pt; color: #555; font-style: italic; }
/* Formulas as text: MathJax's assistive MathML (there for screen readers, clipped away) is painted 1 px high and
   nearly transparent where the formula is, so a search or a copy finds the formula's symbols. */
mjx-assistive-mml { clip: auto !important; font-size: 1px !important; line-height: 1px !important;
  color: rgba(0, 0, 0, 0.02) !important; width: 100% !important; white-space: normal !important; }
"""

# Runs in the page: rebuild <main> as title page + [part heading] + chapters, headings re-levelled by depth.
ARRANGE_JS = """
({docs, parts, title, lines, note, prefaceTitle}) => {
  const main = document.querySelector('main') || document.body;
  const article = main.querySelector('article') || main;
  for (const d of document.querySelectorAll('details')) d.open = true;
  // a hidden cell's toggle ("显示代码 / 隐藏代码"): the printed cell is open and there is nothing to click
  // (emptied and hidden, not removed: a <details> without a <summary> shows the browser's own "Details")
  for (const s of document.querySelectorAll('details.hide > summary')) { s.textContent = ''; s.style.display = 'none'; }
  for (const e of document.querySelectorAll('.toggle-hidden')) e.classList.remove('toggle-hidden');
  for (const w of document.querySelectorAll('.attnbook-static-widget')) {
    const p = document.createElement('p'); p.className = 'pdf-note'; p.textContent = note; w.after(p);
  }
  const sections = {};
  for (const doc of docs) {
    const anchor = document.getElementById('document-' + doc);
    if (!anchor) throw new Error('document not in the single page: ' + doc);
    sections[doc] = anchor.nextElementSibling;
  }
  const out = document.createElement('div');
  const head = document.createElement('div'); head.className = 'pdf-title';
  head.innerHTML = '<h1></h1>' + lines.map(() => '<p></p>').join('');
  head.querySelector('h1').textContent = title;
  head.querySelectorAll('p').forEach((p, i) => { p.textContent = lines[i]; });
  out.appendChild(head);
  const relevel = (section, top) => {
    for (const h of [...section.querySelectorAll('h1,h2,h3,h4,h5,h6')]) {
      let depth = 0;
      for (let e = h.parentElement; e && e !== section.parentElement; e = e.parentElement) if (e.tagName === 'SECTION') depth++;
      const level = Math.min(6, top + Math.max(depth, 1) - 1);
      const n = document.createElement('h' + level);
      for (const a of h.attributes) n.setAttribute(a.name, a.value);
      n.innerHTML = h.innerHTML; h.replaceWith(n);
    }
  };
  const usesParts = Object.keys(parts).length > 0;
  const preface = article.querySelector('section');  // the root page: what remains once the chapters move out
  for (const doc of docs) {
    if (parts[doc]) { const p = document.createElement('h1'); p.className = 'pdf-part'; p.textContent = parts[doc]; out.appendChild(p); }
    const s = sections[doc]; s.classList.add('pdf-chapter'); relevel(s, usesParts ? 2 : 1); out.appendChild(s);
  }
  const first = preface.querySelector('h1');
  first.textContent = prefaceTitle;
  preface.classList.add('pdf-chapter'); relevel(preface, 1); head.after(preface);
  article.replaceChildren(out);
  return docs.length + 1;
}
"""

# Runs in the page laid out at the printed width: shrink what is still wider than the text column.
FIT_JS = """
() => {
  let shrunk = 0;
  const wide = 'mjx-container[display="true"], table, .attnbook-static-widget, .cell_output img, figure img, svg';
  for (const e of document.querySelectorAll(wide)) {
    const box = e.parentElement.getBoundingClientRect().width;
    const need = e.scrollWidth;
    if (box > 0 && need > box + 1) { e.style.zoom = (box / need).toFixed(3); shrunk++; }
  }
  return shrunk;
}
"""


def share_html_handlers(app) -> None:
    if app.builder.name != "singlehtml":
        return
    handlers = app.registry.translation_handlers
    handlers["singlehtml"] = {**handlers.get("html", {}), **handlers.get("singlehtml", {})}


def setup(app):
    app.connect("builder-inited", share_html_handlers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def toc_order() -> tuple[list[str], dict[str, str]]:
    """(docnames in reading order, {first docname of a part: caption}) from _toc.yml."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    docs, parts = [], {}
    for part in toc["parts"]:
        files = [c["file"] for c in part["chapters"]]
        parts[files[0]] = part["caption"]
        docs += files
    return docs, parts


WIDGET_DIV = re.compile(r'<div id="(attnbook-widget-\d+)" class="attnbook-static-widget"')


def unique_widget_ids(page: str) -> str:
    """Number the widgets' element ids across the whole single page.

    Each chapter's kernel numbers its widgets from 0, so on one page two widgets share an id and the second
    one's script would draw into the first one's element. A block is its div and then its script's
    ``getElementById("<id>")``: both get the new id.
    """
    out, position = [], 0
    for number, div in enumerate(WIDGET_DIV.finditer(page)):
        old, new = div.group(1), f"attnbook-widget-{number}"
        lookup = f'getElementById("{old}")'
        end = page.index(lookup, div.end()) + len(lookup)
        block = page[div.start():end].replace(f'id="{old}"', f'id="{new}"', 1).replace(lookup, f'getElementById("{new}")')
        out += [page[position:div.start()], block]
        position = end
    return "".join(out) + page[position:]


def build_single_page(jupyter_book: Path) -> Path:
    subprocess.run([str(jupyter_book), "build", str(ROOT), "--builder", "singlehtml", "--warningiserror",
                    "--keep-going"], check=True, cwd=ROOT)
    page = SINGLE / "book.html"  # at the root, where the page's relative links to _static/ and _images/ resolve
    page.write_text(unique_widget_ids((SINGLE / "chapters" / "index.html").read_text(encoding="utf-8")),
                    encoding="utf-8")
    return page


def title_lines() -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "（未知）"
    today = datetime.date.today().isoformat()
    return ["可执行的注意力机制教材 · PDF 版", f"构建自提交 {commit} · {today}",
            "书中的每个数字和每张图都由这次构建执行章节代码重新算出；交互图在网页版中可以操作。"]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request would bury the build log
        pass


def print_pdf(page: Path, out: Path, chromium: str) -> dict:
    from playwright.sync_api import sync_playwright

    docs, parts = toc_order()
    handler = functools.partial(QuietHandler, directory=str(page.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    title = (ROOT / "_config.yml").read_text(encoding="utf-8").split("title:", 1)[1].splitlines()[0].strip()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium)
            tab = browser.new_page(viewport={"width": 900, "height": 1200})
            errors = []
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto(f"http://127.0.0.1:{server.server_port}/{page.name}", wait_until="load", timeout=180_000)
            tab.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=120_000)
            tab.evaluate("MathJax.startup.promise")
            tab.wait_for_timeout(1000)  # the widgets' static pictures draw after their modules load
            empty = tab.evaluate("() => [...document.querySelectorAll('.attnbook-static-widget')]"
                                 ".filter(w => !w.children.length).map(w => w.dataset.widget)")
            errors += [f"widget drew nothing: {name}" for name in empty]
            tab.add_style_tag(content=PRINT_CSS)
            tab.emulate_media(media="print")
            tab.set_viewport_size({"width": PRINT_WIDTH_PX, "height": 1200})
            count = tab.evaluate(ARRANGE_JS, {"docs": docs, "parts": parts, "title": title,
                                              "lines": title_lines(), "note": WIDGET_NOTE,
                                              "prefaceTitle": PREFACE_TITLE})
            shrunk = tab.evaluate(FIT_JS)
            out.parent.mkdir(parents=True, exist_ok=True)
            tab.pdf(path=str(out), format="A4", print_background=True, outline=True, tagged=True,
                    prefer_css_page_size=True, display_header_footer=True, header_template="<span></span>",
                    footer_template='<div style="font-size:8pt;width:100%;text-align:center;color:#555">'
                                    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')
            browser.close()
    finally:
        server.shutdown()
    return {"documents": count, "shrunk_to_fit": shrunk, "page_errors": errors}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--skip-build", action="store_true", help="print the existing _build/singlehtml")
    args = parser.parse_args()
    start = time.perf_counter()
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    page = SINGLE / "book.html" if args.skip_build else build_single_page(jupyter_book)
    out = OUT / NAME
    info = print_pdf(page, out, args.chromium)
    text_start = time.perf_counter()
    info["text_layer"] = pdf_text.fix_pdf(out)  # radicals in Chromium's character maps -> the page's ideographs
    info["text_layer"]["seconds"] = round(time.perf_counter() - text_start, 1)
    info["bookmarks_undoubled"] = pdf_text.fix_outline(out)  # Chromium wrote some titles twice
    info.update(path=str(out.relative_to(ROOT)), megabytes=round(out.stat().st_size / 2**20, 1),
                seconds=round(time.perf_counter() - start, 1))
    print(json.dumps(info, ensure_ascii=False))
    return 1 if info["page_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

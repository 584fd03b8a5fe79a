"""Shared fixtures: the built book, a loopback HTTP server for it, and a headless Debian chromium."""

from __future__ import annotations

import functools
import os
import http.server
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("ATTNBOOK_HTML", ROOT / "_build" / "html"))  # another build: set ATTNBOOK_HTML
CHROMIUM = "/usr/bin/chromium"
# Flags that keep chromium from calling home: this machine (like a reader offline) has no network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions"]


@pytest.fixture(scope="session")
def built_html() -> Path:
    if not (HTML / "index.html").exists():
        pytest.fail("_build/html is missing: run `make book` first (make test does)")
    return HTML


@pytest.fixture(scope="session")
def book_url(built_html):
    """Serve _build/html on 127.0.0.1 on a free port for the whole session."""
    handler = functools.partial(_QuietHandler, directory=str(built_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.fail("Debian chromium is missing: `make browser` installs it (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def chapter_pages(html: Path) -> list[Path]:
    """Every HTML page of the book proper (not Sphinx's search/index pages)."""
    return sorted(p for p in (html / "chapters").rglob("*.html"))


LOCAL_SCHEMES = {"data", "blob", "about"}



def visit(browser, url):
    """Load a page; return (page, console errors, requests to other hosts)."""
    page = browser.new_page()
    errors, foreign = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))

    def on_request(request):
        parsed = urlparse(request.url)
        if parsed.scheme not in LOCAL_SCHEMES and parsed.hostname != "127.0.0.1":
            foreign.append(request.url)

    page.on("request", on_request)
    page.goto(url, wait_until="networkidle")
    page.wait_for_function("() => !window.MathJax || !MathJax.startup || MathJax.startup.promise")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    return page, errors, foreign

"""Shared fixtures: the built book, a loopback HTTP server for it, and a headless Debian chromium."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
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

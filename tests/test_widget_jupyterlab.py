"""The temperature widget in a real JupyterLab: its own JavaScript syncs T both ways with the kernel.

One JupyterLab server for the module, on 127.0.0.1 with a token, its config/data/runtime dirs in a temp
folder (never ~/.jupyter) and nothing that calls the network (news, update check, extension manager).
Debian chromium, driven by Playwright, opens a notebook written here, runs its cells and drags the slider.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import psutil
import pytest
import torch

pytestmark = pytest.mark.browser

LOGITS = [2.0, 1.0, 0.1]
CELLS = [
    "import json, attnbook\n"
    f"w = attnbook.SoftmaxTemperatureWidget({LOGITS})\n"
    "observed = []\n"
    "w.observe(lambda change: observed.append(change['new']), names='temperature')\n"
    "display(w)",
    "print(json.dumps({'temperature': w.temperature, 'observed': observed,\n"
    "                  'probabilities': w.probabilities().tolist()}))",
    "w.temperature = 0.5",
]
# Plugins that would reach the network: the PyPI extension manager and the news/update announcements.
DISABLED_PLUGINS = ["@jupyterlab/extensionmanager-extension", "@jupyterlab/apputils-extension:announcements"]


def _reference(T):
    return torch.softmax(torch.tensor(LOGITS, dtype=torch.float64) / T, dim=-1)


def _wait_for_server(proc, runtime: Path, token: str, log: Path, timeout=60.0) -> str:
    """Base URL once the server answers /api/status; its port comes from the runtime file it writes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        info = runtime / f"jpserver-{proc.pid}.json"
        if info.exists():
            try:
                base = f"http://127.0.0.1:{json.loads(info.read_text())['port']}"
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        return base
            except (OSError, ValueError, KeyError):
                pass  # file half-written or server not listening yet
        time.sleep(0.2)
    pytest.fail(f"JupyterLab did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """(base URL, token, notebook dir) of a JupyterLab server; it and its kernels are killed afterwards."""
    root = tmp_path_factory.mktemp("jupyterlab")
    dirs = {name: root / name for name in ("config", "data", "runtime", "ipython", "work")}
    for d in dirs.values():
        d.mkdir()
    (dirs["config"] / "labconfig").mkdir()
    (dirs["config"] / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {p: True for p in DISABLED_PLUGINS}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update(JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
               JUPYTER_RUNTIME_DIR=str(dirs["runtime"]), IPYTHONDIR=str(dirs["ipython"]))
    token = secrets.token_hex(16)
    log = root / "server.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
           "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", "--ServerApp.port_retries=0",
           "--ServerApp.allow_root=True",  # CI's container runs as root
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={dirs['work']}",
           "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=dirs["work"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield _wait_for_server(proc, dirs["runtime"], token, log), token, dirs["work"]
    finally:
        # Kernels run in sessions of their own: collect them before the server goes.
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass


def _run_cell(page, index):
    """Focus cell `index` and run it with Shift+Enter, as a reader would; wait for its execution count."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputPrompt").element_handle()
    page.wait_for_function(r"p => /^\[\d+\]/.test(p.textContent)", arg=prompt, timeout=60_000)
    return cell


def _drag(page, slider, fraction):
    """Press the mouse on the slider's thumb (now mid-track) and drag it to `fraction` of the track."""
    box = slider.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(box["x"] + fraction * box["width"], y, steps=5)
    page.mouse.up()


def test_slider_and_python_sync_temperature_both_ways(browser, jupyterlab):
    base, token, work = jupyterlab
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, work / "widget.ipynb")

    page = browser.new_page()
    # Every console error and uncaught exception of the page counts: JupyterLab 4.6 with this setup
    # logs none (only info/debug lines), so nothing is filtered out.
    errors, foreign = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: urlparse(r.url).hostname not in (None, "127.0.0.1")  # data:, blob: have none
            and foreign.append(r.url))
    try:
        page.goto(f"{base}/lab/tree/widget.ipynb?token={token}")
        page.locator(".jp-Notebook .jp-CodeCell").nth(len(CELLS) - 1).wait_for(timeout=60_000)
        # A cell run before the kernel is connected is silently not executed: wait for "… | Idle".
        page.wait_for_function("() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]"
                               ".some(e => e.textContent.endsWith('| Idle'))", timeout=60_000)

        cell = _run_cell(page, 0)
        widget = cell.locator(".attnbook-widget")
        slider = widget.locator('input[type="range"]')  # drawn by softmax_temperature.js
        slider.wait_for(timeout=60_000)
        assert cell.locator(".attnbook-static-widget").count() == 0  # live view, not the text/html fallback
        assert float(slider.input_value()) == pytest.approx(0.0, abs=0.005)  # log10 T = 1 (to half a step)

        # Front end -> Python: drag the thumb; the kernel's trait and observer see the browser's T.
        _drag(page, slider, 0.8)
        T_front = 10 ** float(slider.input_value())
        assert T_front > 2.0, f"the drag did not move the slider (T = {T_front})"
        seen = json.loads(_run_cell(page, 1).locator(".jp-OutputArea-output").inner_text())
        assert seen["temperature"] == pytest.approx(T_front, rel=1e-12)
        assert seen["observed"] and seen["observed"][-1] == seen["temperature"]  # one per input event
        probabilities = torch.tensor(seen["probabilities"], dtype=torch.float64)
        torch.testing.assert_close(probabilities, _reference(T_front))

        # Python -> front end: set the trait in a cell; the slider and the drawn numbers follow.
        _run_cell(page, 2)
        page.wait_for_function("([s, v]) => Math.abs(+s.value - v) < 0.005",  # half a slider step
                               arg=[slider.element_handle(), math.log10(0.5)], timeout=10_000)
        p_ref = _reference(0.5)
        drawn = [float(v) for v in widget.locator("text.value").all_text_contents()]  # toFixed(3)
        assert len(drawn) == len(LOGITS)
        assert all(abs(d - p) <= 5e-4 + 1e-12 for d, p in zip(drawn, p_ref.tolist())), (drawn, p_ref)
        readout = widget.locator(".attnbook-readout").text_content()
        T_shown, H_shown = re.search(r"= ([\d.]+)\s+熵 = ([\d.]+)", readout).groups()
        assert T_shown == "0.50"
        assert abs(float(H_shown) - float(-(p_ref * p_ref.log()).sum())) <= 5e-4 + 1e-12, readout
    finally:
        page.close()

    assert not foreign, f"requests to other hosts: {foreign}"
    assert not errors, f"console errors: {errors}"

"""The kernel-regression, RoPE, online-softmax, tile-map, head-browser, cross-attention, sampling and RoPE-scaling
widgets in a real JupyterLab: Playwright moves each widget's own controls, the kernel's traits and Python numbers
follow (against the numbers the page drew), and a trait set in a cell moves the page. Server and helpers:
test_widget_jupyterlab."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import nbformat
import pytest

from test_widget_jupyterlab import _drag, _run_cell, jupyterlab  # noqa: F401 - jupyterlab is a fixture

pytestmark = pytest.mark.browser


class Notebook:
    """A notebook written into the server's folder and opened in a fresh page, its kernel idle."""

    def __init__(self, browser, server, name, cells):
        base, token, work = server
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, work / f"{name}.ipynb")
        self.page, self.errors, self.foreign = browser.new_page(), [], []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: urlparse(r.url).hostname not in (None, "127.0.0.1")
                     and self.foreign.append(r.url))
        # A workspace of its own: JupyterLab would otherwise reopen the earlier tests' notebooks as hidden tabs.
        self.page.goto(f"{base}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={token}")
        self.page.locator(".jp-Notebook .jp-CodeCell").nth(len(cells) - 1).wait_for(timeout=60_000)
        self.page.wait_for_function("() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]"
                                    ".some(e => e.textContent.endsWith('| Idle'))", timeout=60_000)

    def widget(self):
        """Run cell 0 (it displays ``w``); the live view the widget's JS drew, not the static fallback."""
        cell = _run_cell(self.page, 0)
        widget = cell.locator(".attnbook-widget")
        widget.wait_for(timeout=60_000)
        assert cell.locator(".attnbook-static-widget").count() == 0
        return widget

    def python(self, index=1) -> dict:
        """Run a cell that prints one JSON object; return it."""
        return json.loads(_run_cell(self.page, index).locator(".jp-OutputArea-output").inner_text())

    def close(self):
        self.page.close()
        assert not self.foreign, f"requests to other hosts: {self.foreign}"
        assert not self.errors, f"console errors: {self.errors}"


def drag(page, slider, fraction):
    """_drag, after scrolling the slider into view (running a cell scrolls the notebook)."""
    slider.scroll_into_view_if_needed()
    _drag(page, slider, fraction)


def data(locator, name) -> float:
    return float(locator.get_attribute(f"data-{name}"))


def test_kernel_regression(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "kernel_regression", [
        "import json, attnbook\n"
        "w = attnbook.KernelRegressionWidget([3.0, 11.0, 18.0, 30.0, 41.0, 47.0, 62.0, 75.0],\n"
        "    [14.2, 15.1, 16.8, 18.9, 17.5, 16.0, 12.4, 11.8], width=10.0, query=25.0, x_range=(0, 80))\n"
        "display(w)",
        "print(json.dumps({'width': w.width, 'query': w.query, 'estimate': w.estimate(), 'weights': w.weights().tolist()}))",
        "w.query = 60.0",
    ])
    try:
        widget = nb.widget()
        info = widget.locator(".attnbook-readout.info")
        drag(nb.page, widget.locator("input.width"), 0.2)
        drag(nb.page, widget.locator("input.query"), 0.3)
        got = nb.python()
        assert got["width"] == pytest.approx(data(info, "width"), rel=1e-12) and got["width"] < 10.0
        assert got["query"] == pytest.approx(data(info, "query"), rel=1e-12) and got["query"] != 25.0
        assert got["estimate"] == pytest.approx(data(info, "estimate"), abs=1e-9)      # Python = the page's JS
        weights = widget.locator("svg.weights rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.w)")
        assert got["weights"] == pytest.approx(weights, abs=1e-9)
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => +e.dataset.query === 60", arg=info.element_handle(), timeout=10_000)
    finally:
        nb.close()


def test_rope(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "rope", [
        "import json, attnbook, torch\n"
        "g = torch.Generator().manual_seed(0)\n"
        "w = attnbook.RotaryWidget(torch.randn(16, generator=g), torch.randn(16, generator=g), m=3, n=7)\n"
        "display(w)",
        "print(json.dumps({'m': w.m, 'n': w.n, 'pair': w.pair, 'score': w.score()}))",
        "w.pair = 5",
    ])
    try:
        widget = nb.widget()
        info = widget.locator(".attnbook-readout.info")
        score = data(info, "score")
        for _ in range(3):
            widget.locator("button.shift-up").click()
        got = nb.python()
        assert (got["m"], got["n"]) == (6, 10) and got["score"] == pytest.approx(score, abs=1e-9)  # shift: same
        drag(nb.page, widget.locator("input.n"), 0.6)
        got = nb.python()
        assert got["n"] == int(data(info, "n")) != 10 and got["score"] == pytest.approx(data(info, "score"), abs=1e-9)
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.dataset.pair === '5'", arg=info.element_handle(), timeout=10_000)
    finally:
        nb.close()


def test_online_softmax(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "online_softmax", [
        "import json, attnbook, torch\n"
        "g = torch.Generator().manual_seed(1)\n"
        "w = attnbook.OnlineSoftmaxWidget(torch.randn(20, generator=g), torch.randn(20, generator=g), block_size=4)\n"
        "display(w)",
        "print(json.dumps({'step': w.step, 'block': w.block_size, **w.running()}))",
        "w.block_size = 1",
    ])
    try:
        widget = nb.widget()
        info = widget.locator(".attnbook-readout.info")
        drag(nb.page, widget.locator("input.step"), 1.0)
        got = nb.python()
        assert (got["step"], got["block"]) == (5, 4) == (int(data(info, "step")), int(data(info, "block")))
        for key, attr in (("m", "m"), ("l", "l"), ("o_tilde", "ot"), ("o", "o")):
            assert got[key] == pytest.approx(data(info, attr), abs=1e-9)
        assert got["o"] == pytest.approx(data(info, "full"), abs=1e-12)                   # the full softmax
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.dataset.block === '1'", arg=info.element_handle(), timeout=10_000)
    finally:
        nb.close()


def test_tile_map(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "tile_map", [
        "import json, attnbook\nw = attnbook.TileMapWidget(1024, 128, causal=True)\ndisplay(w)",
        "print(json.dumps({'T': w.seq_len, 'b': w.block_size, 'causal': w.causal, **w.counts()}))",
        "w.causal = True",
    ])
    try:
        widget = nb.widget()
        info = widget.locator(".attnbook-readout.info")
        widget.locator("input.causal").click()
        drag(nb.page, widget.locator("input.seq-len"), 0.9)
        got = nb.python()
        assert got["causal"] is False and got["T"] == int(widget.locator("input.seq-len").input_value()) > 1024
        for key, attr in (("computed", "computed"), ("masked", "masked"), ("skipped", "skipped")):
            assert got[key] == int(data(info, attr))
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.checked", arg=widget.locator("input.causal").element_handle(),
                                  timeout=10_000)
        nb.page.wait_for_function("e => +e.dataset.masked > 0", arg=info.element_handle(), timeout=10_000)
    finally:
        nb.close()


def test_head_browser_overview_and_question(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "head_browser", [
        "import json, attnbook, torch\n"
        "eye = torch.eye(4)\n"
        "prev = torch.roll(eye, -1, dims=1)                 # query i -> key i - 1 (row 0 -> key 3)\n"
        "maps = torch.stack([torch.stack([eye, eye, eye]), torch.stack([eye, prev, eye])])  # (L=2, H=3, 4, 4)\n"
        "w = attnbook.AttentionHeadBrowser(['abcd'], maps=([['a', 'b', 'c', 'd']], [maps]))\n"
        "display(w)",
        "print(json.dumps({'layer': w.layer, 'head': w.head, 'answer': w.check_answer(0)}))",
        "w.layer, w.head = 0, 2",
    ])
    try:
        widget = nb.widget()
        overview = widget.locator("canvas.overview")
        scale = overview.bounding_box()["width"] / int(overview.get_attribute("width"))
        step = 4 + 2                                          # 4 tokens + 2 pixels of gap per map
        overview.click(position={"x": (2 + 1 * step + 1.5) * scale, "y": (2 + 1 * step + 1.5) * scale})
        widget.locator(".question button").first.click()
        result = widget.locator(".question .result").first
        got = nb.python()
        assert (got["layer"], got["head"]) == (1, 1) and overview.get_attribute("data-selected") == "1,1"
        assert got["answer"] == [pytest.approx(data(result, "score"), abs=1e-12), True]
        assert result.get_attribute("data-ok") == "true"
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.dataset.selected === '0,2'", arg=overview.element_handle(), timeout=10_000)
    finally:
        nb.close()


def test_cross_attention(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "cross_attention", [
        "import json, attnbook, torch\n"
        "g = torch.Generator().manual_seed(0)\n"
        "maps = [torch.softmax(3 * torch.randn(2, 3, T, S, generator=g), -1) for T, S in [(6, 5), (4, 3)]]\n"
        "w = attnbook.CrossAttentionWidget([list('一二三四五'), list('六七八')],\n"
        "    [list('12345') + ['<eos>'], list('678') + ['<eos>']], maps, question=('q', [1, 2], [(0, 2), (1, 3)], 0.75))\n"
        "display(w)",
        "print(json.dumps({'example': w.example, 'layer': w.layer, 'head': w.head, 'step': w.step,\n"
        "                  'row': w.current_row().tolist(), 'answer': w.check_answer()}))",
        "w.example = 1",
    ])
    try:
        widget = nb.widget()
        info = widget.locator(".attnbook-readout.info")
        drag(nb.page, widget.locator("input.step"), 0.8)
        drag(nb.page, widget.locator("input.head"), 1.0)
        widget.locator("input.layer").evaluate("s => { s.value = 1; s.dispatchEvent(new Event('input')); }")
        widget.locator(".question button").click()
        result = widget.locator(".question .result")
        got = nb.python()
        assert (got["example"], got["layer"], got["head"]) == (0, 1, 2) and got["step"] == int(data(info, "step")) > 0
        strip = widget.locator(".source-strip span").evaluate_all("ss => ss.map(s => +s.dataset.w)")
        assert got["row"] == pytest.approx(strip, abs=1e-12)                             # Python = the page
        assert got["answer"] == [pytest.approx(data(result, "score"), abs=1e-12), data(result, "score") >= 0.75]
        assert result.get_attribute("data-ok") == str(got["answer"][1]).lower()
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.dataset.example === '1'", arg=info.element_handle(), timeout=10_000)
        assert widget.locator(".source-strip span").count() == 3
    finally:
        nb.close()


def test_sampling(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "sampling", [
        "import json, attnbook, torch\n"
        "w = attnbook.SamplingWidget(['甲', '乙'], [list('abcdef'), list('uvwxyz')],\n"
        "    torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -2.0], [0.0, 0.0, 1.0, 1.0, -3.0, 2.0]]), [0.3, 0.8])\n"
        "display(w)",
        "print(json.dumps({'T': w.temperature, 'k': w.top_k, 'p': w.top_p, 'prompt': w.prompt_index,\n"
        "                  'probs': w.probabilities().tolist(), 'drawn': w.drawn()}))",
        "w.top_k = 2",
    ])
    try:
        widget = nb.widget()
        widget.locator("select").select_option("1")
        drag(nb.page, widget.locator("input.temperature"), 0.8)
        drag(nb.page, widget.locator("input.top_p"), 0.6)
        got = nb.python()
        assert got["prompt"] == 1 and got["T"] > 1 and got["p"] < 1 and got["k"] == 0
        bars = widget.locator("rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.p)")
        assert got["probs"] == pytest.approx(bars, abs=1e-9)                            # Python = the page's JS
        assert got["drawn"] == widget.locator(".drawn").get_attribute("data-drawn")
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.value === '2'", arg=widget.locator("input.top_k").element_handle(),
                                  timeout=10_000)
        got = nb.python()                                   # top-2 of [0, 0, 1, 1, -3, 2]: the tied 1s both stay
        bars = widget.locator("rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.p)")
        assert got["probs"] == pytest.approx(bars, abs=1e-9) and sum(v > 0 for v in bars) == 3
    finally:
        nb.close()


def test_rope_scaling(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "rope_scaling", [
        "import json, attnbook\nw = attnbook.RopeScalingWidget(8, 10000.0, 16, method='yarn', factor=4.0)\ndisplay(w)",
        "f, a = w.frequencies()\n"
        "print(json.dumps({'method': w.method, 'factor': w.factor, 'freq': f.tolist(), 'a': a,\n"
        "                  'scores': w.scores().tolist()}))",
        "w.set_controls('linear', 2.0)",
    ])
    try:
        widget = nb.widget()
        info = widget.locator(".attnbook-readout.info")
        widget.locator("label.method-dynamic_ntk").click()
        drag(nb.page, widget.locator("input.factor"), 0.7)
        got = nb.python()
        assert got["method"] == info.get_attribute("data-method") == "dynamic_ntk"
        assert got["factor"] == data(info, "factor") > 4.0
        assert got["freq"] == pytest.approx(json.loads(info.get_attribute("data-inv-freq")), rel=1e-9)  # Python = JS
        assert got["a"] == data(info, "attention-factor") == 1.0
        assert got["scores"] == pytest.approx(json.loads(info.get_attribute("data-scores")), abs=1e-9)
        _run_cell(nb.page, 2)                                   # Python moves both controls
        nb.page.wait_for_function("e => e.dataset.method === 'linear' && +e.dataset.factor === 2",
                                  arg=info.element_handle(), timeout=10_000)
        assert widget.locator("label.method-linear input").is_checked()
    finally:
        nb.close()

"""The GPT chat widget in a real JupyterLab: the weights travel in the widget state (no file), the reader's
controls and prompt reach the kernel, the kernel's torch continuation equals what the page wrote, and a trait set
in a cell moves the page. Server and helpers: test_widget_jupyterlab(_more)."""

from __future__ import annotations

import pytest

from test_widget_jupyterlab import _run_cell, jupyterlab  # noqa: F401 - jupyterlab is a fixture
from test_widget_jupyterlab_more import Notebook, drag

pytestmark = pytest.mark.browser


def test_gpt_chat_runs_in_a_live_kernel(browser, jupyterlab):  # noqa: F811
    nb = Notebook(browser, jupyterlab, "gpt_chat", [
        "import json, attnbook, torch\n"
        "torch.manual_seed(0)\n"
        "itos = ['<pad>', '<unk>', '\\n'] + [chr(0x4E00 + i) for i in range(300)]\n"
        "m = attnbook.DecoderOnlyLM(len(itos), 64, 4, 2, 256, output_bias=True)\n"
        "with torch.no_grad():\n"
        "    m.embed.weight.normal_(0, 0.5); m.final_norm.weight.normal_(0, 1)\n"
        "w = attnbook.GptChatWidget(m, itos, '一丁七万')\n"
        "display(w)",
        "print(json.dumps({'greedy': w.greedy, 'T': w.temperature, 'seed': w.seed, 'prompt': w.prompt,\n"
        "                  'text': w.generate(w.prompt)}, ensure_ascii=False))",
        "w.max_new = 12",
    ])
    try:
        widget = nb.widget()
        assert widget.locator(".message").text_content() == ""          # the weights came with the state
        widget.locator("input.greedy").uncheck()
        drag(nb.page, widget.locator("input.temperature"), 0.7)
        widget.locator("input.seed").fill("7")
        widget.locator("input.seed").dispatch_event("change")
        widget.locator("input.prompt").fill("丈三上下")
        widget.locator("button.go").click()
        widget.locator(".gen-char").nth(29).wait_for()
        got = nb.python()
        assert got["greedy"] is False and got["T"] > 1 and got["seed"] == 7 and got["prompt"] == "丈三上下"
        assert got["text"] == widget.locator(".gpt-text").get_attribute("data-generated")   # torch = the page's JS
        _run_cell(nb.page, 2)
        nb.page.wait_for_function("e => e.value === '12'", arg=widget.locator("input.max_new").element_handle(),
                                  timeout=10_000)
    finally:
        nb.close()

"""The live GPT on the built chapter (_build/html/chapters/gpt.html): the weights file the build wrote beside the
page is weights_script's text, at most 1.5 MB, and the page runs the torch model rebuilt from it (logits on 20
prompts, greedy continuations of 30 characters on 5), with no console error and no request leaving the page.
Prints the page's weight and the generation speed (characters per CPU second of the renderer)."""

from __future__ import annotations

import re

import pytest
import torch

from attnbook.gpt_export import load_weights, read_weights_script, weights_script
from conftest import visit
from test_gpt_chat import check_against_torch, speed
from widget_page import static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]

BLOCK = re.compile(r'<script src="([^"]+)"></script>\n<div id="attnbook-widget-\d+" class="attnbook-static-widget" '
                   r'data-widget="GptChatWidget".*?</script>', re.S)


def test_the_built_gpt_page_runs_its_shipped_model(browser, book_url, built_html):
    html = (built_html / "chapters" / "gpt.html").read_text(encoding="utf-8")
    block = BLOCK.search(html)
    assert block, "the GPT page has no GptChatWidget"
    shipped = built_html / "chapters" / block.group(1)
    text = shipped.read_text(encoding="utf-8")
    name, weights = read_weights_script(text)
    assert name == block.group(1) and text == weights_script(weights, name)
    assert shipped.stat().st_size <= 1_500_000 and len(html.encode()) <= 500_000
    print(f"\ngpt.html {len(html.encode()) / 1000:.0f} KB, its widget block "
          f"{len(block.group(0).encode()) / 1000:.1f} KB, {name} {shipped.stat().st_size / 1000:.0f} KB")

    model, itos = load_weights(weights), weights["itos"]
    stoi = {c: i for i, c in enumerate(itos)}
    encode = lambda s: [stoi.get(c, stoi["<unk>"]) for c in s]   # noqa: E731  (CharVocab.encode)
    page, errors, foreign = visit(browser, f"{book_url}/chapters/gpt.html")
    widget = page.locator('[data-widget="GptChatWidget"]')
    widget.scroll_into_view_if_needed()
    el = widget.element_handle()
    state = static_state(page, widget)
    assert widget.locator(".gpt-text").get_attribute("data-generated") == "".join(state["initial"])
    common = [c for c in itos[2:] if c != "\n"][:400]                 # the most frequent characters first
    g = torch.Generator().manual_seed(0)
    texts = [state["prompt"]] + ["".join(common[int(i)] for i in torch.randint(0, 400, (n,), generator=g))
                                 for n in torch.linspace(2, 64, 19).round().long().tolist()]
    worst = check_against_torch(page, el, model, encode, texts, texts[:5])
    print(f"max |JS - torch| over 20 prompts: {worst:.2e}; greedy generation: "
          f"{speed(page, el, state['prompt'], 30):.0f} characters per CPU second (30 characters), "
          f"{speed(page, el, state['prompt'], 200, repeats=1):.0f} (200)")
    page.close()
    assert errors == [] and foreign == []

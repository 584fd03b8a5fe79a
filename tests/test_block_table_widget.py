"""The block-table widget: Python replays its events through PagedKVCache; the static page's JS allocator gives
the same blocks, reference counts and copies after every click (the built chapter: test_browser_serving.py)."""

from __future__ import annotations

import re

import pytest

from attnbook.widgets.block_table import BlockTableWidget

CLICKS = ["fork", "fork", "step", "new", "step", "step", "finish", "fork", "step", "new", "step", "step", "step",
          "finish", "finish", "step", "fork", "fork", "fork", "step", "step", "step", "step", "step", "step", "step"]


def test_forks_share_the_prompt_and_copy_its_partial_block_once_each():
    w = BlockTableWidget(num_blocks=24, block_size=4, prompt_len=6, events=["fork", "fork", "fork"])
    st = w.state()
    assert st["tables"]["P"] == [0, 1] and st["ref_count"][:2] == [4, 4] and st["copies"] == 0
    w.apply("step")                                   # each child writes into the shared half-full block 1
    st = w.state()
    assert st["copies"] == 3 and st["ref_count"][0] == 4 and st["ref_count"][1] == 1
    assert all(st["lengths"][s] == 7 for s in (1, 2, 3))


def test_finish_frees_only_unshared_blocks_and_a_full_pool_makes_sequences_wait():
    w = BlockTableWidget(num_blocks=3, block_size=2, prompt_len=2, events=["new", "new"] + ["step"] * 5)
    st = w.state()
    assert st["free"] == 0 and sum(st["lengths"].values()) == 6          # 3 blocks of 2: one sequence waited
    w.apply("finish")
    assert w.state()["free"] == 2                                         # the oldest held blocks 0 and 2
    w2 = BlockTableWidget(num_blocks=8, block_size=4, prompt_len=5, events=["fork", "fork", "finish"])
    assert w2.state()["ref_count"][:2] == [2, 2]                         # the prompt keeps its blocks


@pytest.mark.parametrize("kwargs, words", [
    (dict(num_blocks=0), r"num_blocks must be an integer in \[1, 64\], got 0"),
    (dict(block_size=2.5), r"block_size must be an integer in \[1, 16\], got 2.5"),
    (dict(prompt_len=True), r"prompt_len must be an integer in \[1, 64\], got True"),
    (dict(events=["jump"]), r"event must be one of .* got 'jump'"),
])
def test_bad_arguments_raise_value_errors(kwargs, words):
    with pytest.raises(ValueError, match=words):
        BlockTableWidget(**kwargs)


@pytest.mark.browser
def test_static_page_replays_the_same_allocator_and_redraws(browser, tmp_path):
    w = BlockTableWidget(num_blocks=24, block_size=4, prompt_len=6)
    page_file = tmp_path / "widget.html"
    page_file.write_text(f"<!doctype html><meta charset='utf-8'><body>{w.static_html()}</body>", encoding="utf-8")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(page_file.as_uri())
    root = page.locator('[data-widget="BlockTableWidget"]')
    before = root.locator(".info").text_content()
    for event in CLICKS:
        root.locator(f"button.event-{event}").click()
        w.apply(event)
        st = w.state()
        refs = [int(r) for r in root.locator("rect.block").evaluate_all("rs => rs.map(r => r.dataset.ref)")]
        assert refs == st["ref_count"], event
        info = root.locator(".info").text_content()
        assert re.search(rf"写时复制 {st['copies']} 次", info) and re.search(rf"空闲 {st['free']} 块", info)
    assert root.locator(".info").text_content() != before                 # the clicks redrew the pool
    root.locator("button.event-reset").click()
    assert "空闲 24 块" in root.locator(".info").text_content()
    page.close()
    assert errors == []

"""The block-table widget on the built page of 推理时的注意力: clicks redraw the pool, and after every click the
reference counts, copies and free blocks equal attnbook.paged_cache's replay, with no console errors and no request
to another host."""

from __future__ import annotations

import re

import pytest

from attnbook.widgets.block_table import BlockTableWidget
from conftest import visit
from test_block_table_widget import CLICKS
from widget_page import static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_block_table_widget_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/serving.html")
    widget = page.locator('[data-widget="BlockTableWidget"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    assert (state["num_blocks"], state["block_size"], state["prompt_len"], state["events"]) == (24, 4, 6, [])
    py = BlockTableWidget(state["num_blocks"], state["block_size"], state["prompt_len"])
    shown = set()
    for event in CLICKS:
        widget.locator(f"button.event-{event}").click()
        py.apply(event)
        st = py.state()
        refs = [int(r) for r in widget.locator("rect.block").evaluate_all("rs => rs.map(r => r.dataset.ref)")]
        assert refs == st["ref_count"], event
        info = widget.locator(".info").text_content()
        assert re.search(rf"写时复制 {st['copies']} 次", info) and re.search(rf"空闲 {st['free']} 块", info)
        shown.add(info)
    assert len(shown) > 5                                                  # the clicks redrew the pool
    page.close()
    assert errors == [] and foreign == []

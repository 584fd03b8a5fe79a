"""The tile-map widget: its tile kinds against the tiles attnbook.tiled_attention really computes and
against the causal mask, its counts against the chapter's formula, the static fallback and a live kernel."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

import attnbook
import attnbook.efficient as efficient
from attnbook.widgets.tile_map import FULL, MASKED, SKIPPED, tile_kinds
from kernel_comm import LiveWidget


def computed_tiles(monkeypatch, T, b, causal):
    """{(query block, key block): FULL or MASKED} for every tile tiled_attention computes."""
    seen = {}
    real = efficient._block_mask

    def spy(qs, qe, ks, ke, causal_, window, device):
        allowed = real(qs, qe, ks, ke, causal_, window, device)
        seen[qs // b, ks // b] = FULL if allowed is None else MASKED
        return allowed

    monkeypatch.setattr(efficient, "_block_mask", spy)
    x = torch.randn(T, 1, dtype=torch.float64)
    attnbook.tiled_attention(x, x, x, block_size=b, causal=causal)
    return seen


@pytest.mark.parametrize("T, b", [(256, 64), (1024, 128), (768, 512), (300, 64), (64, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_kinds_are_the_tiles_tiled_attention_computes(monkeypatch, T, b, causal):
    kinds = tile_kinds(T, b, causal)
    nb = math.ceil(T / b)
    assert kinds.shape == (nb, nb)
    seen = computed_tiles(monkeypatch, T, b, causal)
    assert seen == {(r, c): int(kinds[r, c]) for r, c in torch.nonzero(kinds != SKIPPED).tolist()}


@pytest.mark.parametrize("T, b", [(256, 64), (1024, 128), (768, 512), (300, 64)])
def test_kinds_match_the_causal_mask_cut_into_tiles(T, b):
    nb = math.ceil(T / b)
    mask = torch.zeros(nb * b, nb * b, dtype=torch.bool)
    mask[:T, :T] = attnbook.causal_mask(T)
    pad = torch.zeros(nb * b, dtype=torch.bool)
    pad[:T] = True
    real = pad[:, None] & pad[None, :]                                   # pairs of real positions
    tiles, real_tiles = mask.view(nb, b, nb, b), real.view(nb, b, nb, b)
    any_ = tiles.any(3).any(1)
    all_ = (tiles | ~real_tiles).all(3).all(1)                           # padding does not count
    expected = any_.long() + (any_ & all_).long()                        # the chapter's tile_kinds
    torch.testing.assert_close(tile_kinds(T, b, True), expected)


@pytest.mark.parametrize("T, b", [(256, 64), (1024, 128), (4096, 64), (768, 512), (3840, 256)])
def test_counts_follow_the_chapter_formula(T, b):
    w = attnbook.TileMapWidget(T, b, causal=True)
    nb = math.ceil(T / b)
    assert w.counts() == dict(n_blocks=nb, computed=nb * (nb + 1) // 2, masked=nb, skipped=nb * (nb - 1) // 2)
    w.causal = False
    assert w.counts() == dict(n_blocks=nb, computed=nb * nb, masked=0, skipped=0)
    assert w.score_bytes() == dict(full=4 * T * T, tiled=4 * (b * b + 2 * b + T))


@pytest.mark.parametrize("T, b", [(1024, 64), (2048, 256)])
def test_memory_formula_is_the_floor_of_the_measured_peak(T, b):
    """The allocator's bytes (the same in every run): tiled attention holds a few times b^2 + 2b + T floats
    beyond its output (scores, weights and masks of one tile are separate tensors), eager at least T^2."""
    w = attnbook.TileMapWidget(T, b, causal=True, t_max=4096, block_sizes=[b])
    q, k, v = (torch.randn(1, 1, T, 64) for _ in range(3))
    with torch.no_grad():
        tiled = attnbook.peak_memory(lambda *a: attnbook.tiled_attention(*a, block_size=b, causal=True), q, k, v)
        eager = attnbook.peak_memory(lambda *a: attnbook.scaled_dot_product_attention(*a)[0], q, k, v)
    mem, out = w.score_bytes(), T * 64 * 4
    assert mem["tiled"] <= tiled - out <= 8 * mem["tiled"]             # measured 4.6-5.9 times
    assert mem["full"] <= eager                                         # measured 4.0 times


@pytest.mark.parametrize("kwargs, message", [
    (dict(seq_len=1000), "multiple of t_step=256"),
    (dict(seq_len=8192), r"in \[256, 4096\]"),
    (dict(block_size=100), "not one of block_sizes"),
    (dict(causal=1), "causal must be True or False"),
    (dict(block_sizes=[64, 0], block_size=64), "must be a positive integer"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.TileMapWidget(**kwargs)


def test_static_fallback_carries_the_settings_and_the_js_classifies_the_tiles():
    w = attnbook.TileMapWidget(2048, 256, causal=False)
    page = w._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state == {"block_size": 256, "block_sizes": [64, 128, 256, 512], "causal": False, "seq_len": 2048,
                     "t_max": 4096, "t_step": 256}
    assert "function tileKinds(" in page and "export default" not in page
    assert not re.search(r"(src|href)=\"?https?://", page)
    assert len(page.encode()) < 60_000


def test_live_kernel_sees_the_controls_and_moves_them():
    with LiveWidget("import attnbook, json\nw = attnbook.TileMapWidget(1024, 128)") as live:
        assert live.send({"seq_len": 2048, "block_size": 64, "causal": False}) == ["block_size", "causal", "seq_len"]
        got = json.loads(live.run("print(json.dumps(w.counts()))"))
        assert got == dict(n_blocks=32, computed=32 * 32, masked=0, skipped=0)
        assert {"causal": True} in live.python_updates("w.causal = True")

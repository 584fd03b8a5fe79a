"""The block-table widget: a paged KV cache's pool, block by block, as sequences start, share a prompt, decode
and finish. The browser replays the same allocator (``block_table.js``); :meth:`BlockTableWidget.state` replays
the events through :class:`attnbook.paged_cache.PagedKVCache`, so the two can be compared cell by cell."""

from __future__ import annotations

from numbers import Integral

import traitlets as t

from ..paged_cache import OutOfBlocks, PagedKVCache
from .static import StaticFallbackWidget

EVENTS = ("new", "fork", "step", "finish")
PROMPT = "P"


class BlockTableWidget(StaticFallbackWidget):
    """A pool of ``num_blocks`` blocks of ``block_size`` tokens. Events, replayed in order:

    - ``new``: a sequence with no tokens yet; ``fork``: a sequence sharing the system prompt (``prompt_len`` tokens,
      written once, on the first fork); ``step``: every live sequence writes one token (one that finds no free
      block waits); ``finish``: the oldest live sequence frees its blocks. The prompt itself stays cached.

    ``events`` is a synced trait (buttons append to it); nothing else changes.

    Shape: state()["ref_count"] (num_blocks,), state()["tables"] {sequence: block ids}.
    """

    _esm_file = "block_table.js"
    title = "分页 KV 缓存：块表、共享与释放"

    num_blocks = t.Int(24).tag(sync=True)
    block_size = t.Int(4).tag(sync=True)
    prompt_len = t.Int(6).tag(sync=True)
    events = t.List(t.Unicode()).tag(sync=True)

    def __init__(self, num_blocks: int = 24, block_size: int = 4, prompt_len: int = 6, events=()):
        for name, n, hi in (("num_blocks", num_blocks, 64), ("block_size", block_size, 16),
                            ("prompt_len", prompt_len, 64)):
            if isinstance(n, bool) or not isinstance(n, Integral) or not 1 <= n <= hi:
                raise ValueError(f"{name} must be an integer in [1, {hi}], got {n!r}")
        super().__init__(num_blocks=int(num_blocks), block_size=int(block_size), prompt_len=int(prompt_len))
        for e in events:
            self.apply(e)

    def apply(self, event: str) -> None:
        """Append one event ('new', 'fork', 'step' or 'finish')."""
        if event not in EVENTS:
            raise ValueError(f"event must be one of {EVENTS}, got {event!r}")
        self.events = [*self.events, event]

    def state(self) -> dict:
        """Replay the events through PagedKVCache: block tables, lengths, reference counts, copies, free blocks."""
        cache = PagedKVCache(self.num_blocks, self.block_size, 1, 1)
        live, count = [], 0
        for e in self.events:
            if e == "new":
                count += 1
                cache.add(count)
                live.append(count)
            elif e == "fork":
                if PROMPT not in cache:
                    if -(-self.prompt_len // self.block_size) > len(cache.free_blocks):
                        continue                                         # no room for the prompt: nothing happens
                    cache.add(PROMPT)
                    cache.reserve(PROMPT, self.prompt_len)
                count += 1
                cache.fork(PROMPT, count)
                live.append(count)
            elif e == "step":
                for s in live:
                    try:
                        cache.reserve(s, 1)
                    except OutOfBlocks:
                        pass                                             # waits for a free block
            elif e == "finish" and live:
                cache.free(live.pop(0))
        return {"tables": {s: list(b) for s, b in cache.tables.items()}, "lengths": dict(cache.lengths),
                "ref_count": list(cache.ref_count), "copies": cache.copies, "free": len(cache.free_blocks)}

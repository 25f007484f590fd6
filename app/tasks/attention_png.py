"""/attention as a PNG: encoder self-attention for classifiers, cross-attention (target x source) for
translators, drawn by app/tasks/heatmap.py.

A PNG takes long to draw, mostly Python holding the GIL: in a thread it would halve the event loop's share of
the interpreter. PngRenderer draws in a process of its own (spawned: numpy and matplotlib only, niced below
the server), one PNG at a time, for at most MAX_PNG_REQUESTS requests at once (429 beyond). When that process
dies (killed, out of memory), the PNGs it had are drawn again once by a new one, then 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from app.core.errors import QueueFull, Unavailable
from app.tasks.attention_maps import AttentionItem, AttentionText, LayerSelection, TextMaps, rounded
from app.tasks.heatmap import heatmap_grid, lower_priority

MAX_PNG_REQUESTS = 4  # PNG requests in progress at once (their maps computing, waiting, or drawing)
RENDER_TRIES = 2  # a PNG whose renderer process died is drawn once more by a new one


def heatmap_inputs(
    handler: AttentionText, item: AttentionItem, maps: TextMaps, sel: LayerSelection
) -> tuple[Any, ...]:
    """heatmap_grid's arguments: the selected maps (L, H, Q, K), the token labels, the title."""
    pieces, source = handler.tokenizer.pieces, handler.tokenizer.pieces(item.source)
    if maps.cross is not None and item.target is not None:  # a translator: target x source
        kind, grid, layers, rows = "cross", maps.cross, sel.decoder, pieces(item.target)
    else:
        kind, grid, layers, rows = "encoder", maps.encoder, sel.encoder, source
    title = f"{handler.name}: {kind} attention"
    return rounded(grid), rows, source, layers, sel.heads, title


def render_attention(
    handler: AttentionText, item: AttentionItem, maps: TextMaps, sel: LayerSelection
) -> bytes:
    """The PNG, drawn in this process."""
    return heatmap_grid(*heatmap_inputs(handler, item, maps, sel))


class PngRenderer:
    """The renderer process (started on first use) and the bound on PNG requests in progress."""

    def __init__(self, limit: int = MAX_PNG_REQUESTS) -> None:
        self.limit, self.active = limit, 0
        self.seconds_ewma = 1.0
        self._executor: ProcessPoolExecutor | None = None  # made on first use: most servers draw no PNG

    def executor(self) -> ProcessPoolExecutor:
        """The renderer process's pool. Spawned, the process imports the server's main module unless it is a
        package's __main__ (python -m app, uvicorn): a script that builds the app needs the usual
        `if __name__ == "__main__":` guard."""
        if self._executor is None:
            context = multiprocessing.get_context("spawn")  # not fork: this process runs threads
            self._executor = ProcessPoolExecutor(
                1, mp_context=context, initializer=lower_priority, initargs=(os.getpid(),)
            )
        return self._executor

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Hold one of the `limit` places for a PNG request (QueueFull when none is left)."""
        if self.active >= self.limit:
            raise QueueFull(
                f"{self.active} PNG attention requests are in progress, the limit; retry later, or ask for "
                "JSON (format=json)",
                max(1, math.ceil(self.active * self.seconds_ewma)),
            )
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    async def render(
        self, handler: AttentionText, item: AttentionItem, maps: TextMaps, sel: LayerSelection
    ) -> bytes:
        start = time.monotonic()
        args = await asyncio.to_thread(heatmap_inputs, handler, item, maps, sel)  # up to 2M weights
        for _ in range(RENDER_TRIES):
            pool = self.executor()
            try:
                png = await asyncio.get_running_loop().run_in_executor(pool, heatmap_grid, *args)
            except BrokenProcessPool:  # the process died (killed?): a new one, for this PNG and the next
                if self._executor is pool:  # (the other PNGs it had may have replaced it already)
                    self._executor = None
                    pool.shutdown(wait=False)
                continue
            self.seconds_ewma = 0.8 * self.seconds_ewma + 0.2 * (time.monotonic() - start)
            return png
        raise Unavailable(
            "the PNG renderer process died while drawing this map, twice; retry, or ask for JSON (format=json)",
            max(1, math.ceil(self.seconds_ewma)),
        )

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

"""Attention heatmaps as one PNG: a grid of the selected layers (rows) x heads (columns).

Encoder self-attention for classifiers, cross-attention (target x source) for translators. Uses matplotlib's
object API with the Agg canvas (no pyplot global state), so it is safe to run in a worker thread. A PNG takes
~1 s of CPU: PngRenderer renders one at a time on a thread of its own, for a bounded number of requests.
"""

from __future__ import annotations

import asyncio
import io
import math
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

from app.attention_maps import AttentionHandler, AttentionItem, LayerSelection, TextMaps, pick
from app.errors import QueueFull

MAX_LABELED_TOKENS = 48  # beyond this, tick labels are unreadable: leave them out
MAX_PNG_REQUESTS = 4  # PNG requests in progress at once (their maps computing, waiting, or rendering)


class PngRenderer:
    """One render thread (never the inference workers or the default pool) and a bound on the PNG
    requests in progress: beyond `limit`, 429 with Retry-After from the recent render time."""

    def __init__(self, limit: int = MAX_PNG_REQUESTS) -> None:
        self.limit, self.active = limit, 0
        self.seconds_ewma = 1.0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="png")

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
        self, handler: AttentionHandler, item: AttentionItem, maps: TextMaps, sel: LayerSelection
    ) -> bytes:
        start = time.monotonic()
        loop = asyncio.get_running_loop()
        png = await loop.run_in_executor(self._executor, render_attention, handler, item, maps, sel)
        self.seconds_ewma = 0.8 * self.seconds_ewma + 0.2 * (time.monotonic() - start)
        return png

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


def render_attention(
    handler: AttentionHandler, item: AttentionItem, maps: TextMaps, sel: LayerSelection
) -> bytes:
    pieces, source = handler.tokenizer.pieces, handler.tokenizer.pieces(item.source)
    if maps.cross is not None and item.target is not None:  # a translator: target x source
        kind, grid, layers, rows = "cross", maps.cross, sel.decoder, pieces(item.target)
    else:
        kind, grid, layers, rows = "encoder", maps.encoder, sel.encoder, source
    title = f"{handler.name}: {kind} attention"
    return heatmap_grid(pick(grid, layers, sel.heads), rows, source, layers, sel.heads, title)


def heatmap_grid(
    grid: torch.Tensor, rows: list[str], cols: list[str], layers: list[int], heads: list[int], title: str
) -> bytes:
    """grid (L, H, Q, K) -> PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_l, n_h, q, k = grid.shape
    cell = min(4.0, max(2.0, 0.22 * max(q, k)))
    fig = Figure(figsize=(cell * n_h + 1.0, cell * n_l + 0.8), dpi=80, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_l, n_h, squeeze=False)
    labeled = max(q, k) <= MAX_LABELED_TOKENS
    image = None
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            ax = axes[i][j]
            image = ax.imshow(grid[i, j].numpy(), vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            if labeled:
                ax.set_xticks(range(k), cols, rotation=90, fontsize=6)
                ax.set_yticks(range(q), rows, fontsize=6)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6)
    fig.suptitle(title, fontsize=10)
    buf = io.BytesIO()
    with warnings.catch_warnings():  # glyphs missing from the default font (e.g. Hangul) only warn
        warnings.simplefilter("ignore", UserWarning)
        fig.savefig(buf, format="png")
    return buf.getvalue()

"""Attention heatmaps as one PNG: a grid of the selected layers (rows) x heads (columns).

numpy and matplotlib only: it runs in the PNG renderer's own process (app/tasks/attention_png.py), which imports
nothing else. matplotlib's object API with the Agg canvas (no pyplot global state).
"""

from __future__ import annotations

import io
import os
import threading
import time
import warnings

import numpy as np

MAX_LABELED_TOKENS = 48  # beyond this, tick labels are unreadable: leave them out
NICE = 10  # the renderer process's CPU priority below the server's (model work first)
ORPHAN_CHECK_S = 1.0  # how often the renderer process looks whether the process that started it is gone


def lower_priority(server: int) -> None:
    """Initializer of the renderer process: matplotlib imported first, at the server's priority (most of a first
    PNG's CPU time; niced, a busy machine starved it past the request deadline), then the process niced.
    server: the pid of the process that started it, watched while it lives (not the parent as read here: the
    server may have died already)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401 (imported for its cost now)
    from matplotlib.figure import Figure  # noqa: F401

    os.nice(NICE)
    threading.Thread(target=_exit_when_orphaned, args=(server,), name="orphan-watch", daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    """End this process once `parent` is no longer its parent (killed, crashed; also when that happened before
    this thread started): a pool's worker waits for work on a pipe it holds both ends of itself, so it would
    otherwise outlive the server forever."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(0)


def heatmap_grid(
    grid: np.ndarray, rows: list[str], cols: list[str], layers: list[int], heads: list[int], title: str
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
            image = ax.imshow(grid[i, j], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
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

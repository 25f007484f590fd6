"""Attention heatmaps as one PNG: a grid of the selected layers (rows) x heads (columns).

Encoder self-attention for classifiers, cross-attention (target x source) for translators. Uses matplotlib's
object API with the Agg canvas (no pyplot global state), so it is safe to run in a worker thread.
"""

from __future__ import annotations

import io
import warnings

import torch

from app.attention_maps import AttentionHandler, AttentionItem, LayerSelection, TextMaps, pick

MAX_LABELED_TOKENS = 48  # beyond this, tick labels are unreadable: leave them out


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

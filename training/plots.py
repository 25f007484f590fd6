"""Loss and validation-metric curves from metrics.jsonl, drawn to a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: render to files only
import matplotlib.pyplot as plt  # noqa: E402


def plot_curves(metrics_path: Path, out_path: Path) -> None:
    records = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval" in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot([r["step"] for r in train], [r["loss"] for r in train])
    ax1.set(xlabel="step", ylabel="training loss", title="loss")
    for key in sorted({k for r in evals for k in r["eval"] if k != "n" and isinstance(r["eval"][k], float)}):
        ax2.plot([r["step"] for r in evals], [r["eval"].get(key) for r in evals], marker="o", label=key)
    ax2.set(xlabel="step", title="validation")
    if evals:
        ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_path, dpi=80)
    plt.close(fig)

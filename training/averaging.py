"""Checkpoint averaging (Vaswani et al. 2017, section 6.1): the mean of the last N snapshots' weights.

At every evaluation the loop writes the model's weights to <run>/snapshots/step-XXXXXXX.safetensors (fp32,
the last `average_last` kept) and evaluates their average as a candidate for best/. Averaging the weights
visited along the end of the schedule usually scores a little above any one of them, at no training cost.
"""

from __future__ import annotations

from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from model.checkpoint import unique_state

SNAPSHOTS = "snapshots"


def snapshot_step(path: Path) -> int:
    """The optimizer step a snapshot file was written at."""
    return int(path.stem.removeprefix("step-"))


def snapshots(run: Path) -> list[Path]:
    """The run's snapshot files, oldest first."""
    return sorted((run / SNAPSHOTS).glob("step-*.safetensors"), key=snapshot_step)


def save_snapshot(run: Path, model: nn.Module, step: int, keep: int) -> list[Path]:
    """Write this step's weights and delete all but the newest `keep`; returns the kept files, oldest first.

    Snapshots newer than `step` (left by a run killed after saving one and resumed from an older state)
    are dropped too: they belong to a trajectory that will not happen again.
    """
    d = run / SNAPSHOTS
    d.mkdir(parents=True, exist_ok=True)
    for p in snapshots(run):
        if snapshot_step(p) > step:
            p.unlink()
    path = d / f"step-{step:07d}.safetensors"
    tmp = path.with_suffix(".tmp")
    # tied weights once (safetensors refuses aliases); average_into writes through the kept name
    tensors = {k: v.detach().float().cpu().contiguous() for k, v in unique_state(model).items()}
    safetensors.torch.save_file(tensors, str(tmp))
    tmp.replace(path)
    kept = snapshots(run)
    for p in kept[:-keep]:
        p.unlink()
    return kept[-keep:]


def average_into(model: nn.Module, paths: list[Path]) -> None:
    """Set `model`'s weights to the element-wise mean of the snapshots (accumulated in fp32)."""
    if not paths:
        raise ValueError("no snapshots to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in safetensors.torch.load_file(str(p)).items():
            total[k] = total[k] + v if k in total else v.clone()
    state = model.state_dict()
    missing = [k for k in total if k not in state]
    if missing:
        raise ValueError(f"snapshot tensors not in the model: {missing[:5]}")
    with torch.no_grad():
        for k, v in total.items():
            state[k].copy_(v / len(paths))

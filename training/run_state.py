"""A training run's live objects (`Run`) and its resumable state file, runs/<name>/state.pt.

state.pt holds the model, optimizer, scheduler, RNG states and data position (our own file, loaded with
weights_only=True), so a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from training.config import TrainConfig, saved_value
from training.prepare import Prepared


@dataclass
class Progress:
    step: int = 0
    epoch: int = 0
    batch: int = 0  # batches of the current epoch already consumed
    best: float = -math.inf
    bad_evals: int = 0
    done: bool = False
    seconds: float = 0.0  # training wall time summed over every resume


@dataclass
class Run:
    """What each step of the training loop reads and updates, on one rank of `world`."""

    cfg: TrainConfig
    data: Prepared
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    lengths: list[int]  # tokens of each training example (source + target): the batches' sizes
    total: int  # optimizer steps of the whole schedule
    rank: int = 0
    world: int = 1
    prog: Progress = field(default_factory=Progress)

    @property
    def state_path(self) -> Path:
        return self.cfg.run_dir / "state.pt"

    @property
    def metrics_path(self) -> Path:
        return self.cfg.run_dir / "metrics.jsonl"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def paused(self) -> bool:
        """stop_at_step reached: a recipe switches schedules here, and a later command goes on."""
        return bool(self.cfg.stop_at_step) and self.prog.step >= self.cfg.stop_at_step


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


# settings a resumed run must share with the saved one (data order, vocabulary, architecture, objective)
RESUME_KEYS = (
    "task",
    "dataset",
    "seed",
    "vocab_size",
    "spm_model_type",
    "spm_split_digits",
    "spm_byte_fallback",
    "d_model",
    "n_heads",
    "n_layers",
    "n_decoder_layers",
    "d_ff",
    "norm_first",
    "pooling",
    "max_src_len",
    "max_tgt_len",
    "truncation",
    "batch_tokens",
    "objective",
    "teachers",
    "distill_dataset",
    "distill_examples",
)


def _check_resumable(saved: dict[str, Any], cfg: TrainConfig, path: Path) -> None:
    now = cfg.to_dict()
    old = {k: saved_value(saved, k) for k in RESUME_KEYS}  # keys newer than the saved state: what it ran with
    diff = {k: (old[k], now[k]) for k in RESUME_KEYS if old[k] != now[k]}
    if diff:
        raise ValueError(
            f"{path}: cannot resume with different settings (saved, now): {diff}; "
            "use another --name or --out-dir for a new run"
        )


def save_state(run: Run) -> None:
    path = run.state_path
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": run.model.state_dict(),
            "optimizer": run.opt.state_dict(),
            "scheduler": run.sched.state_dict(),
            "progress": vars(run.prog),
            "rng": _rng_state(),
            "config": run.cfg.to_dict(),
        },
        tmp,
    )
    tmp.replace(path)  # atomic: a kill mid-save never leaves a broken state.pt


def load_state(run: Run) -> bool:
    """Restore `run` from its state.pt when there is one (after checking the settings match): True if so."""
    path = run.state_path
    if not path.exists():
        return False
    st = torch.load(path, map_location="cpu", weights_only=True)  # RNG states must stay on the CPU
    _check_resumable(st["config"], run.cfg, path)
    run.model.load_state_dict(st["model"])
    run.opt.load_state_dict(st["optimizer"])
    run.sched.load_state_dict(st["scheduler"])
    run.prog = Progress(**st["progress"])
    _set_rng_state(st["rng"])
    return True


def is_done(run_dir: Path) -> bool:
    state = run_dir / "state.pt"
    return state.exists() and torch.load(state, weights_only=True)["progress"]["done"]


def log_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")

"""Fit a classifier's temperature on its validation split and store it in the checkpoint's config.json.

  python -m training calibrate --checkpoint runs/sentiment-en/best [--data-dir DIR]

Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks"): one number T, the
served probabilities become softmax(logits / T). T minimises the negative log-likelihood of the validation
split's gold labels; the weights, and so every label, stay as they are. Only config.json changes (its
"model" temperature and "training" calibration record; the files it checksums do not), so running it
again refits from the same logits.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from model import SentimentClassifier, load_checkpoint
from model.checkpoint import CONFIG, read_config
from model.inference import classifier_logits
from model.jit import compile_classifier
from model.preprocess import classifier_ids
from training.data import load_split, resolve_data_dir
from training.metrics import ECE_BINS, expected_calibration_error

# the search range of T; a well-trained classifier's lies well inside it (shipped: 1.5 to 3)
T_MIN, T_MAX = 0.05, 20.0


def nll(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    """Mean negative log-likelihood of the gold labels under softmax(logits / temperature)."""
    return F.cross_entropy(logits / temperature, labels).item()


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, steps: int = 60) -> float:
    """The T in [T_MIN, T_MAX] of least NLL (logits (N, C), labels (N,)), rounded to 3 decimals.

    The NLL is convex in 1/T (a log-sum-exp less a linear term), so a golden-section search on log T
    finds its one minimum; 60 steps narrow the range by 0.618**60, far below the rounding."""
    lo, hi = math.log(T_MIN), math.log(T_MAX)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = nll(logits, labels, math.exp(a)), nll(logits, labels, math.exp(b))
    for _ in range(steps):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = nll(logits, labels, math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = nll(logits, labels, math.exp(b))
    return round(math.exp((lo + hi) / 2), 3)


def calibration_report(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> dict[str, Any]:
    """What T does on a split: NLL and ECE at T = 1 (as trained) and at T."""
    before, after = logits.softmax(-1), (logits / temperature).softmax(-1)
    return {
        "nll_before": round(nll(logits, labels, 1.0), 4),
        "nll_after": round(nll(logits, labels, temperature), 4),
        "ece_before": round(expected_calibration_error(before, labels), 4),
        "ece_after": round(expected_calibration_error(after, labels), 4),
    }


def calibrate(checkpoint: Path, data_dir: Path) -> dict[str, Any]:
    """Fit T on the checkpoint's validation split, write it into its config.json; returns the record."""
    loaded = load_checkpoint(checkpoint)
    if not isinstance(loaded.model, SentimentClassifier):
        raise SystemExit(f"error: {checkpoint} is a {loaded.config.task} model; calibrate is for classifiers")
    dataset = loaded.meta.get("training", {}).get("config", {}).get("dataset")
    if dataset is None:
        raise SystemExit(f"error: {checkpoint / CONFIG} names no training dataset (training.config.dataset)")
    start = time.time()
    valid = load_split(dataset, "valid", data_dir)
    texts = [x.text for x in valid]  # type: ignore[union-attr]
    ids = [classifier_ids(loaded.tokenizer, t, loaded.config) for t in texts]  # type: ignore[arg-type]
    logits = classifier_logits(loaded.model, ids, 128, compile_classifier(loaded.model), texts)  # raw, T = 1
    labels = torch.tensor([x.label for x in valid])  # type: ignore[union-attr]
    temperature = fit_temperature(logits, labels)
    record = {
        "temperature": temperature,
        "method": "temperature scaling, least NLL on the validation split",
        "split": "valid",
        "n": len(valid),
        "bins": ECE_BINS,
        **calibration_report(logits, labels, temperature),
        "seconds": round(time.time() - start),
    }
    meta = read_config(checkpoint)
    meta["model"]["temperature"] = temperature
    meta.setdefault("training", {})["calibration"] = record
    tmp = checkpoint / f".{CONFIG}.tmp"
    tmp.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(checkpoint / CONFIG)  # whole or not at all
    load_checkpoint(checkpoint)  # and it loads
    return record


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training calibrate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint", type=Path, required=True, help="a classifier checkpoint (e.g. a run's best/)"
    )
    p.add_argument("--data-dir", default=None, help="default: $TRAINING_DATA_DIR, else ../shared/data")
    args = p.parse_args(argv)
    record = calibrate(args.checkpoint, resolve_data_dir(args.data_dir))
    print(json.dumps({"checkpoint": str(args.checkpoint), **record}))
    return 0

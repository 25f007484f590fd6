"""Add a hashed n-gram head to a trained classifier ("wide & deep"), in place in a run's best checkpoint.

  python -m training ngram-head --run runs/sentiment-en [--spec w3c4] [--buckets 2097152] [--data-dir DIR]

The head (model.ngram) is fit on the run's gold training split alone, its epoch chosen on valid. Then one
weight `alpha` for its logits is chosen on valid (grid ALPHAS; the encoder's weight is 1) and folded into the
table, so the served model computes encoder logits + head logits. The encoder is not touched: running the
command again refits the head from the same encoder. The valid metric in best/metrics.json becomes the
combined model's; the encoder's own is kept as `encoder_valid`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from model import SentimentClassifier, load_checkpoint, save_checkpoint
from model.inference import classifier_logits, classify_texts
from model.jit import compile_classifier
from model.ngram import NgramSpec
from model.preprocess import classifier_ids
from training.data import LabeledText, load_split, resolve_data_dir
from training.metrics import accuracy_f1
from training.ngram_fit import Bags, fit, logits

log = logging.getLogger(__name__)
ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.2, 1.5)


def add_head(
    model: SentimentClassifier,
    tokenizer: Any,
    train: list[LabeledText],
    valid: list[LabeledText],
    spec: NgramSpec,
    buckets: int,
    epochs: int = 4,
    lr: float = 0.005,
    seed: int = 0,
) -> tuple[SentimentClassifier, dict[str, Any]]:
    """The classifier with a fitted, alpha-scaled n-gram head, and what was measured on valid."""
    bare = model.encoder_only()
    ids = [classifier_ids(tokenizer, x.text, bare.cfg) for x in valid]
    encoder = classifier_logits(bare, ids, 128, compile_classifier(bare))  # (V, C) logits
    bags, vbags = Bags([x.text for x in train], spec, buckets), Bags([x.text for x in valid], spec, buckets)
    labels, vlabels = torch.tensor([x.label for x in train]), torch.tensor([x.label for x in valid])
    head = fit(
        bags,
        labels,
        torch.arange(len(train)),
        (vbags, vlabels),
        len(bare.cfg.labels),
        epochs,
        seed,
        buckets,
        lr,
    )
    wide = logits(head, vbags, torch.arange(len(valid)))  # (V, C)
    scores = {a: ((encoder + a * wide).argmax(-1) == vlabels).float().mean().item() for a in ALPHAS}
    alpha = max(ALPHAS, key=lambda a: (scores[a], -a))  # ties: the smaller weight
    out = SentimentClassifier(replace(bare.cfg, ngram=str(spec), ngram_buckets=buckets))
    state = bare.state_dict() | {
        "ngram.table.weight": alpha * head.table.weight,
        "ngram.bias": alpha * head.bias,
    }
    out.load_state_dict(state)
    report = {
        "spec": str(spec),
        "buckets": buckets,
        "alpha": alpha,
        "valid_accuracy_by_alpha": {str(a): round(s, 4) for a, s in scores.items()},
        "head_valid_accuracy": round((wide.argmax(-1) == vlabels).float().mean().item(), 4),
        "encoder_valid_accuracy": round((encoder.argmax(-1) == vlabels).float().mean().item(), 4),
    }
    return out.eval(), report


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training ngram-head", description=__doc__)
    p.add_argument("--run", type=Path, required=True, help="run directory holding best/ (a sentiment run)")
    p.add_argument("--spec", default="w3c4", help="word and character n-gram orders, 'wWcC' (default w3c4)")
    p.add_argument(
        "--buckets", type=int, default=1 << 21, help="hash buckets (on disk 2 bytes x classes each, fp16)"
    )
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    try:
        spec = NgramSpec.parse(args.spec)
    except ValueError as e:
        print(f"error: {e}")
        return 2
    if args.buckets < 1:
        print(f"error: --buckets must be >= 1, got {args.buckets}")
        return 2
    best = args.run / "best"
    loaded = load_checkpoint(best)
    if not isinstance(loaded.model, SentimentClassifier):
        print(f"error: {best} is a {loaded.config.task} model; an n-gram head is for sentiment classifiers")
        return 2
    dataset = loaded.meta["training"]["config"]["dataset"]
    data_dir = resolve_data_dir(args.data_dir)
    train, valid = load_split(dataset, "train", data_dir), load_split(dataset, "valid", data_dir)
    start = time.time()
    model, report = add_head(
        loaded.model,
        loaded.tokenizer,
        train,
        valid,
        spec,
        args.buckets,
        args.epochs,
        args.lr,
        args.seed,  # type: ignore[arg-type]
    )
    training = loaded.meta.get("training", {}) | {
        "ngram_head": report | {"seconds": round(time.time() - start)}
    }
    training.pop("calibration", None)  # new logits at T = 1: `python -m training calibrate` fits T again
    tmp, old = best.with_name("best.tmp"), best.with_name("best.old")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(tmp, model, best / loaded.meta.get("tokenizer", "tokenizer.model"), training=training)
    saved = load_checkpoint(tmp)  # measure what was written (fp16), not the fp32 model in memory
    probs = classify_texts(saved.model, saved.tokenizer, [x.text for x in valid])  # type: ignore[arg-type]
    res = accuracy_f1(probs.argmax(-1).tolist(), [x.label for x in valid])
    metrics = json.loads((best / "metrics.json").read_text())
    metrics["encoder_valid"] = metrics.get("encoder_valid", metrics.get("valid", {}))
    metrics["valid"] = {"metric": res["accuracy"], **res}
    (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")  # not checksummed in config.json
    shutil.rmtree(old, ignore_errors=True)
    best.rename(old)  # swapped only once complete: an interrupted run leaves best/ as it was
    tmp.rename(best)
    shutil.rmtree(old)
    print(json.dumps({"checkpoint": str(best), "valid": metrics["valid"], **report}))
    return 0

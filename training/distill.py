"""Knowledge distillation for the classifiers: teacher soft labels on unlabeled in-domain text.

The teachers (trained checkpoints, any tokenizer or size) label a sample of unlabeled texts with their
averaged class probabilities; the student trains on the labeled set (one-hot gold targets) plus these soft
targets. When the unlabeled texts are the labeled set's own texts (imdb-text), every review is seen twice:
with its gold label and with the teachers' probabilities (the classic mix of hard and soft targets).
Teacher probabilities are cached in the run directory, keyed by the teachers' weights and the texts, so a
resumed run does not label again.
"""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from model import load_checkpoint
from model.inference import classify_ids, traced_predict
from model.preprocess import classifier_ids

log = logging.getLogger(__name__)
CACHE = "teacher_probs.safetensors"


def sample_texts(texts: list[str], exclude: set[str], n: int, seed: int) -> list[str]:
    """Up to n distinct texts (0 = all) not in `exclude` (the validation texts), in a seeded random order."""
    seen = set(exclude)
    pool = [t for t in texts if t.strip() and not (t in seen or seen.add(t))]  # type: ignore[func-returns-value]
    random.Random(seed).shuffle(pool)
    return pool[:n] if n else pool


def _key(teachers: list[str], texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in teachers:
        h.update((Path(t) / "model.safetensors").read_bytes())
    for text in texts:
        h.update(text.encode() + b"\n")
    return h.hexdigest()


def teacher_probs(teachers: list[str], texts: list[str], cache_dir: Path) -> torch.Tensor:
    """Mean class probabilities (N, C) of the teacher checkpoints on `texts`, cached in cache_dir."""
    key, path = _key(teachers, texts), cache_dir / CACHE
    if path.exists():
        with safe_open(path, "pt") as f:
            if (f.metadata() or {}).get("key") == key:
                return f.get_tensor("probs")
        log.info("%s was made for other teachers or texts: labelling again", path)
    total: torch.Tensor | None = None
    labels: list[str] | None = None
    for t in teachers:
        loaded = load_checkpoint(t)
        cfg = loaded.model.cfg
        if cfg.task != "sentiment" or (labels is not None and list(cfg.labels) != labels):
            raise ValueError(f"teacher {t}: not a classifier with the labels {labels}")
        labels = list(cfg.labels)
        log.info("teacher %s labels %d texts", t, len(texts))
        ids = [classifier_ids(loaded.tokenizer, x, cfg) for x in texts]
        probs = classify_ids(loaded.model, ids, batch_size=128, predict=traced_predict(loaded.model))
        total = probs if total is None else total + probs
    if total is None:
        raise ValueError("distillation needs at least one teacher checkpoint")
    mean = (total / len(teachers)).contiguous()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({"probs": mean}, tmp, metadata={"key": key, "teachers": ",".join(teachers)})
    tmp.replace(path)
    return mean

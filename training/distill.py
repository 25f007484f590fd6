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
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from model import load_checkpoint
from model.inference import classify_ids
from model.jit import compile_classifier
from model.preprocess import classifier_ids
from training.data import LabeledText
from training.ngram_teacher import ngram_probs, teacher_spec

log = logging.getLogger(__name__)
CACHE = "teacher_probs.safetensors"


def sample_texts(texts: list[str], exclude: set[str], n: int, seed: int) -> list[str]:
    """Up to n distinct texts (0 = all) not in `exclude` (the validation texts), in a seeded random order."""
    seen = set(exclude)
    pool = [t for t in texts if t.strip() and not (t in seen or seen.add(t))]  # type: ignore[func-returns-value]
    random.Random(seed).shuffle(pool)
    return pool[:n] if n else pool


def _key(teachers: list[str], texts: list[str], fit: Sequence[LabeledText], seed: int) -> str:
    h = hashlib.sha256()
    for t in teachers:
        h.update(t.encode() if teacher_spec(t) else (Path(t) / "model.safetensors").read_bytes())
    if any(teacher_spec(t) for t in teachers):  # n-gram teachers are fit here, on the labeled set
        h.update(f"seed {seed} hash 2\n".encode())  # hash 2: model.ngram.features
        for x in fit:
            h.update(f"{x.label}\t{x.text}\n".encode())
    for text in texts:
        h.update(text.encode() + b"\n")
    return h.hexdigest()


def teacher_probs(
    teachers: list[str],
    texts: list[str],
    cache_dir: Path,
    labels: tuple[str, ...],
    train: Sequence[LabeledText] = (),
    valid: Sequence[LabeledText] = (),
    seed: int = 0,
) -> torch.Tensor:
    """Mean class probabilities (N, C) of the teachers on `texts`, cached in cache_dir.

    A teacher is a classifier checkpoint directory or an n-gram spec (``ngram-w3c4``, training/ngram_teacher.py),
    which is fit here on `train` (k-fold, epochs chosen on `valid`).
    """
    key, path = _key(teachers, texts, [*train, *valid], seed), cache_dir / CACHE
    if path.exists():
        with safe_open(path, "pt") as f:
            if (f.metadata() or {}).get("key") == key:
                return f.get_tensor("probs")
        log.info("%s was made for other teachers or texts: labelling again", path)
    if not teachers:
        raise ValueError("distillation needs at least one teacher")
    total = torch.zeros(len(texts), len(labels))
    for t in teachers:
        log.info("teacher %s labels %d texts", t, len(texts))
        if spec := teacher_spec(t):
            if not train or not valid:
                raise ValueError(f"teacher {t}: an n-gram teacher needs the labeled train and valid sets")
            total += ngram_probs(spec, train, valid, texts, len(labels), seed=seed)
            continue
        loaded = load_checkpoint(t)
        cfg = loaded.model.cfg
        if cfg.task != "sentiment" or tuple(cfg.labels) != tuple(labels):
            raise ValueError(f"teacher {t}: not a classifier with the labels {list(labels)}")
        ids = [classifier_ids(loaded.tokenizer, x, cfg) for x in texts]
        total += classify_ids(loaded.model, ids, 128, compile_classifier(loaded.model), texts)
    mean = (total / len(teachers)).contiguous()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({"probs": mean}, tmp, metadata={"key": key, "teachers": ",".join(teachers)})
    tmp.replace(path)
    return mean

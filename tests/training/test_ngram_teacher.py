"""The hashed n-gram teacher: features, k-fold (out-of-fold) labelling, and its use as a distillation teacher."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from model.ngram import NgramSpec
from training.config import parse_overrides
from training.data import LabeledText
from training.distill import teacher_probs
from training.ngram_teacher import ngram_probs, teacher_spec
from training.prepare import prepare

from .test_train import tiny


def test_teacher_spec() -> None:
    assert teacher_spec("ngram-w3c4") == NgramSpec(3, 4)
    assert teacher_spec("ngram-w2c0") == NgramSpec(2, 0)
    assert teacher_spec("runs/sentiment-ko/best") is None
    assert teacher_spec("ngram-w3") is None


def _rows(n: int, seed: int) -> list[LabeledText]:
    rng = random.Random(seed)
    rows = [LabeledText(f"{'great' if i % 2 else 'awful'} tok{seed}x{i}", i % 2) for i in range(n)]
    # no signal at all: a token seen once, a coin-flip label; only a model fit on it can know its label
    rows += [LabeledText(f"noise{seed}x{i}", rng.randrange(2)) for i in range(n)]
    return rows


def test_ngram_probs_are_out_of_fold_for_training_texts() -> None:
    train, valid = _rows(200, 0), _rows(20, 1)
    texts = [x.text for x in train] + ["great unseen", "awful unseen"]
    probs = ngram_probs(NgramSpec(1, 0), train, valid, texts, 2, folds=2, epochs=150)  # 1 step an epoch
    assert probs.shape == (len(texts), 2)
    assert torch.allclose(probs.sum(-1), torch.ones(len(texts)))
    signal, noise = probs[:200], probs[200:400]
    labels = torch.tensor([x.label for x in train[:200]])
    assert (signal.argmax(-1) == labels).all()
    assert probs[-2, 1] > 0.8
    assert probs[-1, 0] > 0.8
    # held out of the fold that labels it, a noise text gets the prior, not its own (memorized) label
    assert ((noise[:, 1] - 0.5).abs() < 0.2).all()


@pytest.mark.slow  # trains: not in `make test-fast`
def test_distillation_with_an_ngram_teacher(synthetic_data_dir: Path, tmp_path: Path) -> None:
    cfg = parse_overrides(
        tiny(synthetic_data_dir, tmp_path, epochs=1, teachers="ngram-w2c3"),
        {"task": "sentiment", "dataset": "nsmc", "name": "student", "distill_dataset": "nsmc-unlabeled"},
    )
    data = prepare(cfg)
    soft = torch.tensor([y for _, y in data.train if isinstance(y, tuple) and 0 < y[0] < 1])
    assert len(soft) > 0
    assert torch.allclose(soft.sum(-1), torch.ones(len(soft)))


def test_an_ngram_teacher_needs_the_labeled_sets(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="labeled train and valid"):
        teacher_probs(["ngram-w1c0"], ["some text"], tmp_path, ("negative", "positive"))

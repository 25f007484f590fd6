"""A classifier's calibrated temperature: the served probabilities are softmax(logits / T), on every path,
labels unchanged, stored in config.json, and a checkpoint without one answers as before."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from model import SentimentClassifier, load_checkpoint, pad_ids, save_checkpoint
from model.inference import classifier_logits, classify_ids, classify_texts
from model.jit import compile_classifier
from model.ngram import NgramSpec, bags
from model.preprocess import classifier_ids
from tests.conftest import tiny_sentiment_config, tiny_translation_config

V = 60
TEXTS = ["a cat", "the dog sat on the mat", "x", "le chien mange une pomme rouge"]


def with_head(temperature: float = 1.0, vocab_size: int = V) -> SentimentClassifier:
    """A tiny classifier with an n-gram head (random weights, large enough to matter)."""
    torch.manual_seed(0)
    cfg = tiny_sentiment_config(vocab_size, ngram="w2c3", ngram_buckets=4096, temperature=temperature)
    model = SentimentClassifier(cfg)
    assert model.ngram is not None
    torch.nn.init.normal_(model.ngram.table.weight, std=0.5)
    return model.eval()


def seqs(n: int = 4) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, V, (3 + 5 * i,), generator=g).tolist() for i in range(n)]


@pytest.mark.parametrize("temperature", [0.0, -1.0, math.nan, math.inf])
def test_temperature_must_be_positive_and_finite(temperature: float) -> None:
    with pytest.raises(ValueError, match="temperature must be a positive finite number"):
        tiny_sentiment_config(V, temperature=temperature)


def test_a_translator_has_no_temperature() -> None:
    with pytest.raises(ValueError, match="a temperature is for sentiment models"):
        tiny_translation_config(V, temperature=2.0)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.5])
def test_probabilities_are_the_softmax_of_logits_over_temperature_on_every_path(temperature: float) -> None:
    model = with_head(temperature)
    ids = seqs()
    logits = classifier_logits(model, ids, texts=TEXTS)  # as the model computes them, before T
    want = (logits / temperature).softmax(-1)
    torch.testing.assert_close(classify_ids(model, ids, texts=TEXTS), want, rtol=0, atol=1e-6)
    graph = compile_classifier(model)  # the served path
    torch.testing.assert_close(classify_ids(model, ids, 2, graph, TEXTS), want, rtol=0, atol=1e-6)
    one = model.predict(pad_ids(ids[:1], 0), bags(TEXTS[:1], NgramSpec.parse("w2c3"), 4096))
    torch.testing.assert_close(one, want[:1], rtol=0, atol=1e-6)
    assert torch.equal(want.argmax(-1), logits.argmax(-1))  # a temperature never changes a label


def test_a_higher_temperature_lowers_every_top_score() -> None:
    ids = seqs()
    plain = classify_ids(with_head(1.0), ids, texts=TEXTS).max(-1).values
    cooled = classify_ids(with_head(3.0), ids, texts=TEXTS).max(-1).values
    assert (cooled < plain).all()
    assert (cooled > 0.5).all()


def test_temperature_round_trips_through_the_checkpoint(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> None:
    model = with_head(1.75, tiny_vocab_size)
    save_checkpoint(tmp_path / "ck", model, tiny_tokenizer_path, dtype=torch.float32)
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["model"]["temperature"] == 1.75
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.config.temperature == 1.75
    torch.testing.assert_close(
        classify_texts(loaded.model, loaded.tokenizer, TEXTS),  # type: ignore[arg-type]
        classify_texts(model, loaded.tokenizer, TEXTS),  # type: ignore[arg-type]
    )


def test_a_checkpoint_without_a_temperature_answers_as_before(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> None:
    """Checkpoints shipped before calibration have no "temperature": they load at 1.0, probabilities unchanged."""
    model = with_head(1.0, tiny_vocab_size)
    save_checkpoint(tmp_path / "ck", model, tiny_tokenizer_path, dtype=torch.float32)
    config = tmp_path / "ck" / "config.json"
    meta = json.loads(config.read_text())
    del meta["model"]["temperature"]
    config.write_text(json.dumps(meta))
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.config.temperature == 1.0
    ids = [classifier_ids(loaded.tokenizer, t, loaded.config) for t in TEXTS]
    logits = classifier_logits(loaded.model, ids, texts=TEXTS)  # type: ignore[arg-type]
    assert torch.equal(classify_ids(loaded.model, ids, texts=TEXTS), logits.softmax(-1))  # type: ignore[arg-type]


def test_the_encoder_alone_drops_the_temperature() -> None:
    """The temperature was fitted on the whole model's logits, not on the encoder's."""
    model = with_head(2.0)
    assert model.encoder_only().cfg.temperature == 1.0

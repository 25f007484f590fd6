"""bench/make_tiny_checkpoints.py: random-init checkpoints for trying the server and the bench."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("own_tokenizer", [False, True])
def test_make_tiny_checkpoints_writes_loadable_models(
    tmp_path: Path, tiny_tokenizer_path: Path, own_tokenizer: bool
) -> None:
    """bench/make_tiny_checkpoints.py: three checkpoints that load and run; --tokenizer is copied in as is."""
    from bench.make_tiny_checkpoints import main as make
    from model import DecodeOptions, load_checkpoint
    from model.inference import classify_texts, translate_texts

    args = ["--d-model", "16", "--layers", "1", "--heads", "1"]
    assert (
        make([str(tmp_path), *args, *(["--tokenizer", str(tiny_tokenizer_path)] if own_tokenizer else [])])
        == 0
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentiment-en", "sentiment-ko", "translate-fr-en"]
    for name in ("sentiment-en", "sentiment-ko", "translate-fr-en"):
        tokenizer = (tmp_path / name / "tokenizer.model").read_bytes()
        assert (tokenizer == tiny_tokenizer_path.read_bytes()) is own_tokenizer
        m = load_checkpoint(tmp_path / name)
        assert m.config.d_model == 16
        if name.startswith("sentiment"):
            probs = classify_texts(m.model, m.tokenizer, ["a cat", "le chien"])
            assert probs.shape == (2, 2)
        else:
            [[(text, score)]] = translate_texts(
                m.model, m.tokenizer, ["le chat"], DecodeOptions(beam_size=1), "en"
            )
            assert isinstance(text, str)
            assert score <= 0

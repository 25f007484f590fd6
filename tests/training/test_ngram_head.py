"""python -m training ngram-head: a hashed n-gram head added to a trained classifier, shipped and evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model import load_checkpoint
from training.__main__ import main
from training.ngram_head import ALPHAS

from .test_train import evaluate_nsmc, last_json, tiny


def _encoder(path: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_checkpoint(path).model.state_dict().items() if not k.startswith("ngram.")}


@pytest.mark.slow  # trains: not in `make test-fast`
def test_ngram_head_is_fit_shipped_and_evaluated(
    synthetic_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["sentiment", "--dataset=nsmc", "--name=ko", *tiny(synthetic_data_dir, tmp_path, epochs=1)]) == 0
    )
    run, best = tmp_path / "ko", tmp_path / "ko" / "best"
    encoder, valid_before = _encoder(best), json.loads((best / "metrics.json").read_text())["valid"]
    argv = [
        "ngram-head",
        "--run",
        str(run),
        "--spec",
        "w1c2",
        "--buckets",
        "4096",
        "--epochs",
        "20",
        "--lr",
        "0.05",
    ]
    argv += ["--data-dir", str(synthetic_data_dir)]
    capsys.readouterr()
    assert main(argv) == 0
    report = last_json(capsys.readouterr().out)
    assert report["alpha"] in ALPHAS
    assert report["head_valid_accuracy"] >= 0.9  # the label is one sentiment word: the head learns it
    loaded = load_checkpoint(best)
    assert (loaded.config.ngram, loaded.config.ngram_buckets) == ("w1c2", 4096)
    assert loaded.meta["training"]["ngram_head"]["alpha"] == report["alpha"]
    metrics = json.loads((best / "metrics.json").read_text())
    assert metrics["encoder_valid"] == valid_before  # the encoder's own score is kept
    assert metrics["valid"]["accuracy"] == report["valid"]["accuracy"] == metrics["valid"]["metric"]
    for k, v in _encoder(best).items():  # the encoder is untouched
        torch.testing.assert_close(v, encoder[k])

    assert main(argv) == 0  # again: refit from the same encoder, not stacked on the first head
    again = last_json(capsys.readouterr().out)
    assert again["alpha"] == report["alpha"]
    assert again["valid"] == report["valid"]
    assert json.loads((best / "metrics.json").read_text())["encoder_valid"] == valid_before

    dest = tmp_path / "shipped"
    ship = ["ship", "--run", str(run), "--name", "toy-ko", "--dest", str(dest)]
    assert main([*ship, "--data-dir", str(synthetic_data_dir)]) == 0
    card = (dest / "toy-ko" / "README.md").read_text()
    assert "hashed n-gram head (`w1c2`: word 1..1-grams and character 1..2-grams in 4,096 buckets)" in card
    metrics = json.loads((dest / "toy-ko" / "metrics.json").read_text())
    res = evaluate_nsmc(dest / "toy-ko", synthetic_data_dir, capsys)
    assert res["accuracy"] == metrics["test"]["accuracy"]  # the card's number, reproduced


def test_ngram_head_refuses_a_translator_and_a_bad_spec(
    synthetic_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ngram-head", "--run", str(tmp_path), "--spec", "w3"]) == 2
    assert "wWcC" in capsys.readouterr().out
    args = tiny(synthetic_data_dir, tmp_path, epochs=1)
    assert main(["translate", "--dataset=tatoeba-fr-en", "--name=fr", *args]) == 0
    capsys.readouterr()
    assert main(["ngram-head", "--run", str(tmp_path / "fr"), "--data-dir", str(synthetic_data_dir)]) == 2
    assert "for sentiment classifiers" in capsys.readouterr().out

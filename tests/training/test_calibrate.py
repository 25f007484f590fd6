"""python -m training calibrate: a temperature fitted on valid, stored in config.json, weights untouched;
the expected calibration error; the probe format of evaluate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model import SentimentClassifier, load_checkpoint, save_checkpoint
from model.inference import classify_texts
from tests.conftest import tiny_sentiment_config
from training.__main__ import main
from training.calibrate import fit_temperature, nll
from training.data import read_probe
from training.metrics import expected_calibration_error

from .test_train import last_json


def test_ece_by_hand() -> None:
    probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]])
    # top scores 0.9 (right), 0.8 (wrong), 0.7 (right), each alone in its bin of 15
    assert expected_calibration_error(probs, torch.tensor([0, 0, 1])) == pytest.approx((0.1 + 0.8 + 0.3) / 3)
    # one bin: mean score 0.6, one right in two
    same = torch.tensor([[0.6, 0.4], [0.6, 0.4]])
    assert expected_calibration_error(same, torch.tensor([0, 1])) == pytest.approx(0.1)
    assert (
        expected_calibration_error(torch.tensor([[1.0, 0.0]]), torch.tensor([0])) == 0.0
    )  # top bin is (14/15, 1]


def test_fit_recovers_the_temperature_that_made_the_labels_calibrated() -> None:
    """Labels drawn from softmax(z): logits 3z are 3 times too confident, and T = 3 undoes that."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(20000, 2, generator=g) * 2
    labels = torch.multinomial(z.softmax(-1), 1, generator=g)[:, 0]
    t = fit_temperature(3 * z, labels)
    assert t == pytest.approx(3.0, rel=0.05)
    assert nll(3 * z, labels, t) < min(nll(3 * z, labels, t * 0.9), nll(3 * z, labels, t * 1.1))
    ece = expected_calibration_error
    assert ece((3 * z / t).softmax(-1), labels) < 0.02 < ece((3 * z).softmax(-1), labels)


@pytest.fixture
def overconfident(tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int) -> Path:
    """A tiny classifier trained on nothing, with large logits, 'trained' on the synthetic NSMC."""
    torch.manual_seed(0)
    model = SentimentClassifier(tiny_sentiment_config(tiny_vocab_size, ngram="w1c2", ngram_buckets=4096))
    assert model.ngram is not None
    torch.nn.init.normal_(model.ngram.table.weight, std=3.0)  # wrong half the time, sure every time
    training = {"config": {"dataset": "nsmc"}, "step": 1}
    return save_checkpoint(tmp_path / "ck", model.eval(), tiny_tokenizer_path, training=training)


def test_calibrate_writes_the_temperature_and_nothing_else(
    overconfident: Path, synthetic_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = (overconfident / "model.safetensors").read_bytes()
    before = load_checkpoint(overconfident)
    texts = ["영화 정말 최고", "지루 별로", "movie the plot"]
    probs_before = classify_texts(before.model, before.tokenizer, texts)  # type: ignore[arg-type]
    capsys.readouterr()
    assert main(["calibrate", "--checkpoint", str(overconfident), "--data-dir", str(synthetic_data_dir)]) == 0
    record = last_json(capsys.readouterr().out)
    t = record["temperature"]
    assert t > 1.5  # the model is overconfident
    assert record["nll_after"] < record["nll_before"]
    assert record["ece_after"] < record["ece_before"]
    assert (record["split"], record["bins"]) == ("valid", 15)
    assert (overconfident / "model.safetensors").read_bytes() == weights
    after = load_checkpoint(overconfident)
    assert after.config.temperature == t
    assert after.meta["training"]["calibration"] == {k: v for k, v in record.items() if k != "checkpoint"}
    assert after.meta["training"]["step"] == 1  # the rest of the record is kept
    probs = classify_texts(after.model, after.tokenizer, texts)  # type: ignore[arg-type]
    assert torch.equal(probs.argmax(-1), probs_before.argmax(-1))
    assert (probs.max(-1).values < probs_before.max(-1).values).all()

    assert main(["calibrate", "--checkpoint", str(overconfident), "--data-dir", str(synthetic_data_dir)]) == 0
    assert last_json(capsys.readouterr().out)["temperature"] == t  # fitted on the raw logits again


def test_calibrate_refuses_a_translator(tiny_translator_checkpoint: Path) -> None:
    with pytest.raises(SystemExit, match="calibrate is for classifiers"):
        main(["calibrate", "--checkpoint", str(tiny_translator_checkpoint)])


def test_evaluate_reports_ece_before_and_after(
    overconfident: Path, synthetic_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(synthetic_data_dir / "nsmc" / "ratings_test.tsv")
    argv = ["evaluate", "--checkpoint", str(overconfident), "--data", data, "--format", "nsmc"]
    assert main(argv) == 0
    plain = last_json(capsys.readouterr().out)
    assert "ece_at_t1" not in plain  # no temperature yet: the served scores are the T = 1 ones
    assert main(["calibrate", "--checkpoint", str(overconfident), "--data-dir", str(synthetic_data_dir)]) == 0
    capsys.readouterr()
    assert main(argv) == 0
    res = last_json(capsys.readouterr().out)
    assert res["accuracy"] == plain["accuracy"]
    assert res["ece_at_t1"] == pytest.approx(plain["ece"])
    assert res["ece"] < res["ece_at_t1"]


def test_probe_format(overconfident: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = tmp_path / "probe.jsonl"
    rows = [
        ("영화 정말 최고", "positive", "verdict"),
        ("지루 별로", "negative", "verdict"),
        ("a b", "negative", "x"),
    ]
    probe.write_text("".join(json.dumps({"text": t, "label": y, "kind": k}) + "\n" for t, y, k in rows))
    argv = ["evaluate", "--checkpoint", str(overconfident), "--data", str(probe), "--format", "probe"]
    assert main(argv) == 0
    res = last_json(capsys.readouterr().out)
    assert res["n"] == 3
    assert res["n_by_kind"] == {"verdict": 2, "x": 1}
    wrong = round(res["accuracy"] * 3)
    assert (res["mean_score_wrong"] is None) == (wrong == 3)
    probe.write_text(json.dumps({"text": "x", "label": "neutral", "kind": "k"}) + "\n")
    with pytest.raises(ValueError, match=r"probe.jsonl:1: not a probe row"):
        read_probe(probe, ("negative", "positive"))

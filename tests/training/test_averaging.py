"""Checkpoint averaging: the mean of snapshots, pruning, and its place in the training loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model import build_model, load_checkpoint
from tests.conftest import tiny_sentiment_config, tiny_translation_config
from training.averaging import average_into, save_snapshot, snapshots
from training.config import parse_overrides
from training.train import train

from .test_train import records, tiny


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(tiny_translation_config(50))


def test_average_is_the_elementwise_mean_and_keeps_tied_weights(tmp_path: Path) -> None:
    models = [_model(s) for s in (1, 2, 3)]
    kept = []
    for step, m in enumerate(models, start=1):
        kept = save_snapshot(tmp_path, m, step * 10, keep=3)
    assert [p.name for p in kept] == [f"step-{s:07d}.safetensors" for s in (10, 20, 30)]
    avg = _model(4)
    average_into(avg, kept)
    for name, value in avg.state_dict().items():
        want = sum(m.state_dict()[name] for m in models) / 3
        torch.testing.assert_close(value, want, rtol=0, atol=1e-6, msg=name)
    # tied embeddings stay one tensor after averaging
    assert avg.tgt_embed.token.weight.data_ptr() == avg.src_embed.token.weight.data_ptr()


def test_only_the_newest_snapshots_are_kept_and_a_replayed_step_drops_later_ones(tmp_path: Path) -> None:
    m = _model(0)
    for step in (1, 2, 3, 4):
        save_snapshot(tmp_path, m, step, keep=2)
    assert [p.name for p in snapshots(tmp_path)] == ["step-0000003.safetensors", "step-0000004.safetensors"]
    save_snapshot(tmp_path, m, 3, keep=2)  # resumed from a state saved before step 4's snapshot
    assert [p.name for p in snapshots(tmp_path)] == ["step-0000003.safetensors"]


def test_average_refuses_empty_and_foreign_snapshots(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no snapshots"):
        average_into(_model(0), [])
    other = build_model(tiny_sentiment_config(50))
    kept = save_snapshot(tmp_path, other, 1, keep=1)
    with pytest.raises(ValueError, match="not in the model"):
        average_into(_model(0), kept)


@pytest.mark.slow  # trains: not in `make test-fast`
def test_training_evaluates_the_average_and_may_ship_it(synthetic_data_dir: Path, tmp_path: Path) -> None:
    cfg = parse_overrides(
        [
            "--dataset=tatoeba-fr-en",
            "--name=avg",
            *tiny(synthetic_data_dir, tmp_path, epochs=3, eval_every=2, average_last=3),
        ],
        {"task": "translation"},
    )
    train(cfg)
    run = tmp_path / "avg"
    assert len(snapshots(run)) == 3
    evals = [r for r in records(run) if "eval" in r]
    assert len(evals) > 3
    assert "eval_average" not in evals[0]  # one snapshot: nothing to average yet
    assert all(r["eval_average"]["snapshots"] == min(i + 1, 3) for i, r in enumerate(evals) if i)
    best_metric = max(max(r["eval"]["metric"], r.get("eval_average", {}).get("metric", -1)) for r in evals)
    best = json.loads((run / "best" / "metrics.json").read_text())["valid"]
    assert best["metric"] == pytest.approx(best_metric)
    meta = load_checkpoint(run / "best").meta["training"]
    if "averaged_steps" in meta:  # the average won: its steps are recorded in the checkpoint
        assert len(meta["averaged_steps"]) in (2, 3)

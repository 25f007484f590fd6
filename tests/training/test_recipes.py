"""training/recipes.py: the chain of commands of each shipped checkpoint, printed and run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model import load_checkpoint
from training.__main__ import main
from training.config import TrainConfig, parse_overrides
from training.recipes import PRESETS, RECIPES, Recipe, Run, command_lines, commands
from training.ship import model_card, recipe_diff

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_dry_run_prints_the_chain_with_the_dirs_given_and_runs_nothing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", name, "--dry-run", "--runs-dir", "/tmp/r", "--data-dir=/d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == command_lines(RECIPES[name], "/tmp/r", "/d")  # what the model card lists
    for line in lines:
        assert line.endswith("--data-dir /d"), line
        assert not re.search(r"(?<![/\w-])runs\b", line), line  # every run path under --runs-dir
    assert not list(tmp_path.iterdir())


def test_reproduce_runs_each_command_in_order_and_stops_at_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[list[str]] = []

    def run(argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 3 if argv[3] == "ngram-head" else 0)

    monkeypatch.setattr(subprocess, "run", run)
    assert main(["reproduce", "sentiment-en"]) == 3
    chain = commands(RECIPES["sentiment-en"])
    stop = [argv[0] for argv in chain].index("ngram-head")
    assert ran == [[sys.executable, "-m", "training", *argv] for argv in chain[: stop + 1]]  # none after it
    assert "error: exit status 3: python -m training ngram-head" in capsys.readouterr().err


def test_an_unknown_recipe_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "sentiment-fr", "--dry-run"])
    assert e.value.code == 2
    assert "invalid choice: 'sentiment-fr'" in capsys.readouterr().err


def _train_configs(name: str) -> list[TrainConfig]:
    """The TrainConfig of every training command of a recipe, as its CLI parses it."""
    return [
        parse_overrides(argv[1:]) for argv in commands(RECIPES[name]) if argv[0] in ("sentiment", "translate")
    ]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_run_starts_from_runs_trained_before_it(name: str) -> None:
    done: set[str] = set()
    for cfg in _train_configs(name):
        starts = [*cfg.teachers.split(","), cfg.init_from, cfg.tokenizer_from]
        assert {
            Path(p).parent.name for p in starts if "/" in p
        } <= done  # runs/NAME/best, runs/NAME/tokenizer.model
        assert cfg.name in PRESETS
        assert cfg.task == PRESETS[cfg.name]["task"]
        done.add(cfg.name)
    assert cfg.name == name  # the last run is the shipped one


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_last_command_is_the_shipped_runs_recorded_config(name: str) -> None:
    recorded = json.loads((CHECKPOINTS / name / "config.json").read_text())["training"]["config"]
    assert recipe_diff(name, recorded) == {}
    assert recipe_diff(name, recorded | {"epochs": 99, "name": "x"}) == {
        "epochs": (99, _train_configs(name)[-1].epochs),
        "name": ("x", name),
    }


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_shipped_card_is_the_one_card_prints(name: str) -> None:
    """The model cards are generated (`python -m training card`), never edited by hand."""
    assert model_card(CHECKPOINTS / name, name) == (CHECKPOINTS / name / "README.md").read_text()


@pytest.mark.slow  # trains: not in `make test-fast`
def test_a_chain_runs_end_to_end_and_resumes(
    synthetic_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiny recipe: a teacher, a student paused at step 2 then finished, its n-gram head, its temperature,
    ship; run twice."""
    tiny = {
        "task": "sentiment",
        "dataset": "nsmc",
        "vocab_size": 120,
        "d_model": 32,
        "n_heads": 2,
        "n_layers": 1,
        "d_ff": 64,
        "batch_tokens": 400,
        "max_src_len": 32,
        "warmup_steps": 5,
        "epochs": 1,
        "threads": 1,
        "eval_max_examples": 20,
    }
    recipe = Recipe(
        runs=(
            Run("toy-teacher", tiny),
            Run(
                "toy",
                {**tiny, "distill_dataset": "nsmc-unlabeled", "distill_examples": 20},
                teachers=("toy-teacher", "ngram-w1c2"),
                init_from="toy-teacher",
                tokenizer_from="toy-teacher",
                commands=({"stop_at_step": 2}, {}),
            ),
        ),
        head="w1c2",
        head_buckets=4096,
    )
    for run in recipe.runs:
        monkeypatch.setitem(PRESETS, run.name, run.settings)
    monkeypatch.setitem(RECIPES, "toy", recipe)
    ran: list[tuple[str, int]] = []

    def in_process(argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        code = main(argv[3:])  # [python, -m, training, ...]
        ran.append((argv[3], code))
        return subprocess.CompletedProcess(argv, code)

    monkeypatch.setattr(subprocess, "run", in_process)
    runs, dest = tmp_path / "runs", tmp_path / "shipped"
    argv = [
        "reproduce",
        "toy",
        "--runs-dir",
        str(runs),
        "--data-dir",
        str(synthetic_data_dir),
        "--dest",
        str(dest),
    ]
    assert main(argv) == 0
    assert [c for c, _ in ran] == ["sentiment", "sentiment", "sentiment", "ngram-head", "calibrate", "ship"]
    student = load_checkpoint(dest / "toy")
    assert student.config.ngram == "w1c2"
    calibration = student.meta["training"]["calibration"]  # fitted on the run's best/, shipped with it
    assert student.config.temperature == calibration["temperature"] != 1.0
    assert (
        json.loads((dest / "toy" / "metrics.json").read_text())["test"]["temperature"]
        == calibration["temperature"]
    )
    recorded = student.meta["training"]["config"]  # shipped without the machine's paths
    assert (recorded["out_dir"], recorded["data_dir"], recorded["stop_at_step"]) == ("runs", "", 0)
    assert recorded["init_from"] == "runs/toy-teacher/best"
    assert recorded["teachers"] == "runs/toy-teacher/best,ngram-w1c2"
    assert recipe_diff("toy", recorded) == {}
    state = torch.load(runs / "toy" / "state.pt", weights_only=True)["progress"]
    assert state["done"]
    assert state["step"] > 2

    ran.clear()
    assert main(argv) == 1  # again: every run is done; ship finds no better validation metric
    assert ran[-1] == ("ship", 1)
    assert torch.load(runs / "toy" / "state.pt", weights_only=True)["progress"] == state


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_classifier_is_calibrated_after_its_head_and_before_ship(name: str) -> None:
    steps = [argv[0] for argv in commands(RECIPES[name])]
    if RECIPES[name].runs[-1].settings["task"] != "sentiment":
        assert "calibrate" not in steps
        return
    assert steps[-3:] == ["ngram-head", "calibrate", "ship"]
    assert commands(RECIPES[name], "R")[-2] == ["calibrate", "--checkpoint", f"R/{name}/best"]
    shipped = load_checkpoint(CHECKPOINTS / name)  # the shipped checkpoint is the calibrated one
    assert shipped.config.temperature == shipped.meta["training"]["calibration"]["temperature"]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_shipped_run_pins_the_tokenizer_it_shipped_with(name: str) -> None:
    """The shipped tokenizers predate split digits and byte fallback (on by default for new runs): every run of
    a recipe pins both off, and every training command spells that out."""
    default = TrainConfig(task="sentiment", dataset="nsmc")
    assert (default.spm_split_digits, default.spm_byte_fallback) == (True, True)
    for run in RECIPES[name].runs:
        assert run.settings["spm_split_digits"] is False, run.name
        assert run.settings["spm_byte_fallback"] is False, run.name
    for cfg in _train_configs(name):
        assert (cfg.spm_split_digits, cfg.spm_byte_fallback) == (False, False), cfg.name
    for line in command_lines(RECIPES[name]):
        if line.split()[3] in ("sentiment", "translate"):
            assert "--spm-split-digits false --spm-byte-fallback false" in line, line
    recorded = json.loads((CHECKPOINTS / name / "config.json").read_text())["training"]["config"]
    assert "spm_split_digits" not in recorded  # shipped before the setting: it ran with the tokenizer off
    assert recipe_diff(name, recorded | {"spm_byte_fallback": True}) == {"spm_byte_fallback": (True, False)}

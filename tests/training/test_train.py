"""End-to-end training runs on synthetic data: train -> checkpoint -> evaluate, exact resume, DDP smoke."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch

from model import build_model, load_checkpoint
from model.inference import classify_texts
from training import prepare as prepare_module
from training.__main__ import main
from training.config import TrainConfig, parse_overrides
from training.data import load_split
from training.distill import CACHE, sample_texts
from training.prepare import prepare
from training.run_state import _check_resumable
from training.train import _build, init_from, train

REPO = Path(__file__).resolve().parents[2]


def tiny(data_dir: Path, out_dir: Path, **extra: object) -> list[str]:
    args = {
        "vocab_size": 120,
        "d_model": 32,
        "n_heads": 2,
        "n_layers": 1,
        "n_decoder_layers": 1,
        "d_ff": 64,
        "batch_tokens": 600,
        "warmup_steps": 5,
        "epochs": 2,
        "threads": 1,
        "data_dir": data_dir,
        "out_dir": out_dir,
        "eval_max_examples": 20,
        "log_every": 1,
        "max_src_len": 32,
        "max_tgt_len": 32,
        "lr": 3e-3,
        **extra,
    }
    return [a for k, v in args.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def train_translator(data_dir: Path, out_dir: Path, dataset: str, name: str, **extra: object) -> None:
    """`python -m training translate` of a `tiny` model on a synthetic data set, into out_dir / name."""
    assert (
        main(["translate", f"--dataset={dataset}", f"--name={name}", *tiny(data_dir, out_dir, **extra)]) == 0
    )


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def evaluate_nsmc(checkpoint: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    """`python -m training evaluate` of a checkpoint on the synthetic NSMC test split: its JSON line."""
    capsys.readouterr()
    test_file = data_dir / "nsmc" / "ratings_test.tsv"
    assert (
        main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(test_file), "--format", "nsmc"]) == 0
    )
    return last_json(capsys.readouterr().out)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # trains: not in `make test-fast`
def test_translate_train_checkpoint_evaluate(
    synthetic_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train_translator(synthetic_data_dir, tmp_path, "tatoeba-fr-en", "fr")
    best = tmp_path / "fr" / "best"
    loaded = load_checkpoint(best)
    assert loaded.config.task == "translation"
    assert loaded.config.source_langs == ("fr",)
    assert (tmp_path / "fr" / "curves.png").stat().st_size > 1000
    evals = [r for r in records(tmp_path / "fr") if "eval" in r]
    assert [r["epoch"] for r in evals] == [1, 2]  # validated once per epoch
    capsys.readouterr()
    test_file = synthetic_data_dir / "tatoeba" / "fra-eng" / "test.tsv"
    assert main(["evaluate", "--checkpoint", str(best), "--data", str(test_file), "--format", "tatoeba"]) == 0
    res = last_json(capsys.readouterr().out)
    assert res["n"] == 40
    assert 0 <= res["bleu"] <= 100
    assert 0 <= res["chrf"] <= 100
    assert res["bleu_signature"].startswith("nrefs:1")
    assert res["decoding"]["beam_size"] == 4
    assert res["dtype"] == "float32"
    capsys.readouterr()  # --dtype: scored as the server serves it with APP_DTYPE=bfloat16
    args = ["evaluate", "--checkpoint", str(best), "--data", str(test_file), "--format", "tatoeba"]
    assert main([*args, "--dtype", "bfloat16", "--limit", "8"]) == 0
    half = last_json(capsys.readouterr().out)
    assert (half["dtype"], half["n"]) == ("bfloat16", 8)
    assert 0 <= half["bleu"] <= 100


@pytest.mark.slow  # trains: not in `make test-fast`
def test_sentiment_train_checkpoint_evaluate(
    synthetic_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = tiny(synthetic_data_dir, tmp_path, epochs=6, batch_tokens=400)
    assert main(["sentiment", "--dataset=nsmc", "--name=ko", *args]) == 0
    res = evaluate_nsmc(tmp_path / "ko" / "best", synthetic_data_dir, capsys)
    assert res["n"] == 80
    assert set(res) >= {"accuracy", "macro_f1"}
    assert res["accuracy"] >= 0.9  # the label is one sentiment word: a working loop learns it


def mlm_then_fine_tune(
    data_dir: Path, out_dir: Path, name: str, *extra: str, **settings: object
) -> list[dict]:
    """Train an NSMC classifier (1 epoch) after a masked-LM phase; returns that phase's loss records."""
    args = tiny(data_dir, out_dir, epochs=1, pretrain_dataset="nsmc-unlabeled", **settings)
    assert main(["sentiment", "--dataset=nsmc", f"--name={name}", *extra, *args]) == 0
    return [r for r in records(out_dir / name / "mlm") if "loss" in r]


@pytest.mark.slow  # trains: not in `make test-fast`
def test_sentiment_with_masked_lm_pretraining(synthetic_data_dir: Path, tmp_path: Path) -> None:
    mlm = mlm_then_fine_tune(synthetic_data_dir, tmp_path, "ko", pretrain_steps=6, pretrain_batch_tokens=400)
    assert [r["step"] for r in mlm] == [1, 2, 3, 4, 5, 6]
    pretrained = load_checkpoint(tmp_path / "ko" / "mlm" / "best")
    tuned = load_checkpoint(tmp_path / "ko" / "best")
    assert tuned.config == pretrained.config  # same architecture and tokenizer in both phases
    assert tuned.meta["training"]["config"]["init_from"] == str(tmp_path / "ko" / "mlm" / "best")
    fresh = build_model(pretrained.config)
    init_from(fresh, str(tmp_path / "ko" / "mlm" / "best"))
    for name, tensor in pretrained.model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name


@pytest.mark.slow  # trains: not in `make test-fast`
def test_multi30k_evaluate_reads_split_prefix(
    synthetic_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train_translator(synthetic_data_dir, tmp_path, "multi30k-de-en", "de", epochs=1)
    capsys.readouterr()
    prefix = synthetic_data_dir / "multi30k" / "test"
    argv = [
        "evaluate",
        "--checkpoint",
        str(tmp_path / "de" / "best"),
        "--data",
        str(prefix),
        "--format",
        "multi30k",
        "--beam-size",
        "2",
        "--limit",
        "10",
    ]
    assert main(argv) == 0
    res = last_json(capsys.readouterr().out)
    assert res["n"] == 10
    assert res["pair"] == "de-en"
    assert res["decoding"]["beam_size"] == 2


@pytest.mark.slow  # trains: not in `make test-fast`
def test_resume_continues_exactly(synthetic_data_dir: Path, tmp_path: Path) -> None:
    """An interrupted run resumed from state.pt has the same loss curve as an uninterrupted one."""
    common = tiny(synthetic_data_dir, tmp_path, epochs=3, dropout=0.2)
    full = parse_overrides(["--dataset=tatoeba-fr-en", "--name=full", *common], {"task": "translation"})
    train(full)
    part = parse_overrides(["--dataset=tatoeba-fr-en", "--name=part", *common], {"task": "translation"})
    train(replace(part, stop_at_step=5))  # mid-epoch: the data position and RNG must be restored
    assert max(r["step"] for r in records(tmp_path / "part")) == 5
    train(part)
    losses_full = [(r["step"], r["loss"]) for r in records(tmp_path / "full") if "loss" in r]
    losses_part = [(r["step"], r["loss"]) for r in records(tmp_path / "part") if "loss" in r]
    assert len(losses_full) > 8
    assert losses_part == losses_full
    evals_full = [r["eval"] for r in records(tmp_path / "full") if "eval" in r]
    evals_part = [r["eval"] for r in records(tmp_path / "part") if "eval" in r]
    assert evals_part == evals_full


@pytest.mark.slow  # trains: not in `make test-fast`
def test_sigterm_saves_the_state_and_the_run_resumes(synthetic_data_dir: Path, tmp_path: Path) -> None:
    """kill PID stops a run after its current step with a resumable state; the same command finishes it."""
    cfg = parse_overrides(
        ["--dataset=tatoeba-fr-en", "--name=sig", *tiny(synthetic_data_dir, tmp_path, epochs=50)],
        {"task": "translation"},
    )
    metrics = tmp_path / "sig" / "metrics.jsonl"

    def kill_after_step_3() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if metrics.exists() and any(r.get("step", 0) >= 3 for r in records(tmp_path / "sig")):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.01)

    before = signal.getsignal(signal.SIGTERM)
    killer = threading.Thread(target=kill_after_step_3)
    killer.start()
    train(cfg)
    killer.join()
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is restored
    progress = torch.load(tmp_path / "sig" / "state.pt", weights_only=True)["progress"]
    assert not progress["done"]
    assert 3 <= progress["step"] < 50
    resumed = replace(cfg, epochs=2)  # a shorter schedule: the resumed run finishes quickly
    train(resumed)
    assert torch.load(tmp_path / "sig" / "state.pt", weights_only=True)["progress"]["done"]


@pytest.mark.slow  # trains: not in `make test-fast`
def test_a_finished_run_continues_on_a_longer_schedule(synthetic_data_dir: Path, tmp_path: Path) -> None:
    cfg = parse_overrides(
        ["--dataset=tatoeba-fr-en", "--name=ext", *tiny(synthetic_data_dir, tmp_path, epochs=1)],
        {"task": "translation"},
    )
    train(cfg)
    state = tmp_path / "ext" / "state.pt"
    first = torch.load(state, weights_only=True)["progress"]
    assert first["done"]
    train(cfg)  # the same schedule: nothing to do
    assert torch.load(state, weights_only=True)["progress"]["step"] == first["step"]
    train(replace(cfg, epochs=2))
    second = torch.load(state, weights_only=True)["progress"]
    assert second["done"]
    assert second["epoch"] == 2
    assert second["step"] > first["step"]


@pytest.mark.slow  # trains: not in `make test-fast`
def test_a_run_paused_at_a_step_goes_on_under_the_next_command(
    synthetic_data_dir: Path, tmp_path: Path
) -> None:
    """--stop-at-step pauses a run where a recipe switches schedules; once passed, that command does nothing."""
    args = ["--dataset=tatoeba-fr-en", "--name=p", *tiny(synthetic_data_dir, tmp_path, epochs=3)]
    first = parse_overrides([*args, "--stop-at-step=4"], {"task": "translation"})
    state = tmp_path / "p" / "state.pt"
    train(first)
    paused = torch.load(state, weights_only=True)["progress"]
    assert (paused["step"], paused["done"]) == (4, False)
    train(replace(first, epochs=2, stop_at_step=0))  # the shorter schedule from step 4 on, to its end
    done = torch.load(state, weights_only=True)["progress"]
    assert (done["epoch"], done["done"]) == (2, True)
    assert done["step"] > 4
    train(first)  # re-running the chain: the pausing command must not extend the finished run
    assert torch.load(state, weights_only=True)["progress"] == done


def test_unknown_config_key_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["translate", "--dataset=tatoeba-fr-en", "--bogus=1"]) == 2
    assert "Unknown config key: --bogus" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"Unknown config key: --d_model \(did you mean --d-model\?\)"):
        parse_overrides(["--dataset", "x", "--d_model", "64"], {"task": "translation"})
    with pytest.raises(ValueError, match="expected --key value or --key=value, got '64'"):
        parse_overrides(["--dataset", "x", "--d-model", "64", "64"], {"task": "translation"})
    with pytest.raises(ValueError, match="--epochs needs a value"):
        parse_overrides(["--dataset", "x", "--epochs"], {"task": "translation"})
    with pytest.raises(ValueError, match="--bf16: expected a boolean"):
        parse_overrides(["--dataset=x", "--bf16=maybe"], {"task": "translation"})


def test_options_take_a_space_or_an_equals_sign() -> None:
    spaced = ["--preset", "translate-fr-en", "--d-model", "128", "--betas", "0.9,0.99", "--dry-run"]
    equals = ["--preset=translate-fr-en", "--d-model=128", "--betas=0.9,0.99", "--dry-run=true"]
    for args in (spaced, equals):
        cfg = parse_overrides(args, {"task": "translation"})
        assert (cfg.dataset, cfg.name) == ("tatoeba-fr-en", "translate-fr-en")
        assert (cfg.d_model, cfg.betas, cfg.dry_run) == (128, (0.9, 0.99), True)
    # a boolean option alone is true, and takes its value from the next argument if that is not an option
    cfg = parse_overrides(
        ["--dataset", "x", "--norm-first", "false", "--bf16", "--lr", "-1"], {"task": "translation"}
    )
    assert (cfg.norm_first, cfg.bf16, cfg.lr) == (False, True, -1.0)


def test_train_help_lists_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["translate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--d-model" in out
    assert "--dataset                  (required)" in out
    assert all(f"--{f.replace('_', '-')} " in out for f in TrainConfig.__dataclass_fields__)


@pytest.mark.slow
def test_ddp_two_cpu_processes(synthetic_data_dir: Path, tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "training",
        "translate",
        "--dataset=tatoeba-fr-en",
        "--name=ddp",
        *tiny(synthetic_data_dir, tmp_path, epochs=1),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert load_checkpoint(tmp_path / "ddp" / "best").config.task == "translation"
    steps = [r["step"] for r in records(tmp_path / "ddp") if "loss" in r]
    single = parse_overrides(
        ["--dataset=tatoeba-fr-en", "--name=single", *tiny(synthetic_data_dir, tmp_path, epochs=1)],
        {"task": "translation"},
    )
    steps_single = _build(single, prepare(single), 0, 1).total  # one process's steps over the same epoch
    assert max(steps) <= steps_single // 2 + 1  # each rank takes half of the batches


def test_preset_decides_the_task(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = parse_overrides(["--preset=sentiment-ko"], {"task": "translation"})
    assert cfg.task == "sentiment"
    assert cfg.dataset == "nsmc"
    assert main(["translate", "--preset=sentiment-ko"]) == 2
    assert "not translation" in capsys.readouterr().err


@pytest.mark.slow  # trains: not in `make test-fast`
def test_resume_refuses_changed_settings(synthetic_data_dir: Path, tmp_path: Path) -> None:
    base = ["--dataset=tatoeba-fr-en", "--name=r", *tiny(synthetic_data_dir, tmp_path)]
    train(parse_overrides([*base, "--stop-at-step", "2"], {"task": "translation"}))
    changed = parse_overrides([*base, "--d-model=64"], {"task": "translation"})
    with pytest.raises(ValueError, match="cannot resume with different settings.*d_model"):
        train(changed)


@pytest.mark.slow  # trains: not in `make test-fast`
def test_ship_writes_card_and_selects_on_validation(
    synthetic_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train_translator(synthetic_data_dir, tmp_path, "tatoeba-fr-en", "fr", epochs=1)
    dest = tmp_path / "shipped"
    argv = ["ship", "--run", str(tmp_path / "fr"), "--dest", str(dest), "--data-dir", str(synthetic_data_dir)]
    assert main([*argv, "--name", "translate-fr-en"]) == 2  # not the run recipe translate-fr-en makes
    assert "the run is not recipe 'translate-fr-en'" in capsys.readouterr().out
    assert not dest.exists()
    argv += ["--name", "toy-fr-en"]
    assert main(argv) == 0
    shipped = dest / "toy-fr-en"
    metrics = json.loads((shipped / "metrics.json").read_text())
    assert metrics["test"]["n"] == 40
    assert "metric" in metrics["valid"]
    assert metrics["shipped"] == datetime.now(UTC).date().isoformat()
    floats = [v for part in ("test", "valid") for v in metrics[part].values() if isinstance(v, float)]
    assert all(round(v, 4) == v for v in floats)
    card = (shipped / "README.md").read_text()
    assert f"| bleu | {metrics['test']['bleu']} |" in card
    assert "No recipe in training/recipes.py" in card
    (shipped / "README.md").write_text("edited by hand")
    assert main(["card", "--checkpoint", str(shipped)]) == 0  # the card is regenerated from the files
    assert (shipped / "README.md").read_text() == card
    assert load_checkpoint(shipped).config.task == "translation"
    capsys.readouterr()
    assert main(argv) == 1  # same validation metric: not an improvement, the shipped one stays
    assert "not shipping" in capsys.readouterr().out


@pytest.mark.slow  # trains: not in `make test-fast`
def test_masked_lm_phase_runs_pretrain_steps_past_the_fine_tuning_epochs(
    synthetic_data_dir: Path, tmp_path: Path
) -> None:
    # ~2,700 tokens of unlabeled text in batches of 4,000: one or two steps per MLM epoch, so 5 steps take
    # several epochs of it while fine-tuning runs epochs=1 (max_steps alone decides a phase's length)
    phase = {"pretrain_steps": 5, "pretrain_batch_tokens": 4000}
    mlm = mlm_then_fine_tune(synthetic_data_dir, tmp_path, "ko", **phase)
    assert [r["step"] for r in mlm] == [1, 2, 3, 4, 5]
    assert mlm[-1]["epoch"] >= 2
    assert [r["epoch"] for r in records(tmp_path / "ko") if "eval" in r] == [1]  # fine-tuning: its 1 epoch
    # pretrain_epochs caps the phase at that many epochs of its text (the schedule still spans 5 steps)
    capped = mlm_then_fine_tune(synthetic_data_dir, tmp_path, "capped", "--pretrain-epochs=1", **phase)
    assert 1 <= len(capped) < 5
    assert {r["epoch"] for r in capped} == {0}
    assert capped[0]["lr"] == mlm[0]["lr"]


@pytest.mark.slow  # trains: not in `make test-fast`
def test_distillation_adds_teacher_labelled_texts(synthetic_data_dir: Path, tmp_path: Path) -> None:
    teacher_args = tiny(synthetic_data_dir, tmp_path, epochs=1)
    assert main(["sentiment", "--dataset=nsmc", "--name=teacher", *teacher_args]) == 0
    teacher = tmp_path / "teacher" / "best"
    student = parse_overrides(
        tiny(synthetic_data_dir, tmp_path, epochs=1, teachers=f"{teacher},{teacher}"),
        {
            "task": "sentiment",
            "dataset": "nsmc",
            "name": "student",
            "distill_dataset": "nsmc-unlabeled",
            "distill_examples": 50,
        },
    )
    data = prepare(student)
    soft = [y for _, y in data.train if isinstance(y, tuple) and 0 < y[0] < 1]
    gold = [y for _, y in data.train if y in ((1.0, 0.0), (0.0, 1.0))]
    assert len(soft) == 50
    assert len(gold) == len(data.train) - 50
    loaded = load_checkpoint(teacher)
    texts = sample_texts(
        load_split("nsmc-unlabeled", "train", synthetic_data_dir),
        {x.text for x in load_split("nsmc", "valid", synthetic_data_dir)},
        50,
        student.seed,
    )
    want = classify_texts(loaded.model, loaded.tokenizer, texts)  # two copies of one teacher: its own probs
    assert torch.allclose(torch.tensor(soft), want, atol=1e-5)
    cache = tmp_path / "student" / CACHE
    stamp = cache.stat().st_mtime_ns
    assert prepare(student).train == data.train
    assert cache.stat().st_mtime_ns == stamp
    train(student)
    assert load_checkpoint(tmp_path / "student" / "best").meta["training"]["config"]["teachers"]


def test_distillation_needs_teachers(synthetic_data_dir: Path, tmp_path: Path) -> None:
    args = tiny(synthetic_data_dir, tmp_path, distill_dataset="nsmc-unlabeled")
    with pytest.raises(ValueError, match="teachers"):
        prepare(parse_overrides(args, {"task": "sentiment", "dataset": "nsmc"}))


def test_sample_texts_leaves_out_valid_and_duplicates() -> None:
    pool = ["a", "b", "b", "c", " ", "d", "e"]
    got = sample_texts(pool, {"c"}, 0, seed=1)
    assert sorted(got) == ["a", "b", "d", "e"]
    assert sample_texts(pool, {"c"}, 2, seed=1) == got[:2]


def test_prepare_trains_the_tokenizer_the_config_asks_for(
    synthetic_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spm_split_digits / spm_byte_fallback reach the tokenizer training; both default to on for new runs."""
    calls: list[dict] = []
    real = prepare_module.train_tokenizer

    def spy(*args: object, **kwargs: object) -> Path:
        calls.append(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(prepare_module, "train_tokenizer", spy)
    base = {"task": "sentiment", "dataset": "nsmc"}
    default = parse_overrides(tiny(synthetic_data_dir, tmp_path), {**base, "name": "new"})
    assert (default.spm_split_digits, default.spm_byte_fallback) == (True, True)
    prepare(default)
    pinned = tiny(synthetic_data_dir, tmp_path, spm_split_digits=False, spm_byte_fallback="false")
    prepare(parse_overrides(pinned, {**base, "name": "pinned"}))
    assert [(c["split_digits"], c["byte_fallback"]) for c in calls] == [(True, True), (False, False)]


@pytest.mark.parametrize("key", ["spm_split_digits", "spm_byte_fallback"])
def test_resume_checks_the_tokenizer_settings(key: str, tmp_path: Path) -> None:
    """A state saved before these settings existed ran with both off: it resumes with them off only."""
    cfg = TrainConfig(
        task="translation", dataset="tatoeba-fr-en", spm_split_digits=False, spm_byte_fallback=False
    )
    saved = cfg.to_dict()
    del saved["spm_split_digits"], saved["spm_byte_fallback"]
    _check_resumable(saved, cfg, tmp_path / "state.pt")
    with pytest.raises(ValueError, match=f"cannot resume with different settings.*{key}"):
        _check_resumable(saved, replace(cfg, **{key: True}), tmp_path / "state.pt")
    _check_resumable(cfg.to_dict() | {key: True}, replace(cfg, **{key: True}), tmp_path / "state.pt")

"""Ship a run's best checkpoint: evaluate on the test split, write metrics.json and the model card.

  python -m training ship --run /work/runs/translate-fr-en [--name translate-fr-en] [--dest checkpoints]

Refuses to replace a shipped checkpoint unless the new validation metric is better (`--force` overrides);
the test split is only measured, never used to choose.
"""

from __future__ import annotations

import argparse
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model import load_checkpoint
from model.checkpoint import read_config
from training.data import resolve_data_dir
from training.evaluate import run as evaluate_run

# dataset -> (test file relative to the data dir, evaluate --format, headline metric)
TEST_SETS: dict[str, tuple[str, str, str]] = {
    "nsmc": ("nsmc/ratings_test.tsv", "nsmc", "accuracy"),
    "imdb": ("imdb/test.tsv", "imdb", "accuracy"),
    "tatoeba-fr-en": ("tatoeba/fra-eng/test.tsv", "tatoeba", "bleu"),
    "tatoeba-es-en": ("tatoeba/spa-eng/test.tsv", "tatoeba", "bleu"),
    "tatoeba-en-fr": ("tatoeba/fra-eng/test.tsv", "tatoeba", "bleu"),
    "tatoeba-en-es": ("tatoeba/spa-eng/test.tsv", "tatoeba", "bleu"),
    "multi30k-de-en": ("multi30k/test", "multi30k", "bleu"),
    "multi30k-en-de": ("multi30k/test", "multi30k", "bleu"),
}
CARD_METRICS = ("accuracy", "macro_f1", "bleu", "chrf", "n")
DATA_NOTES = {
    "nsmc": "NSMC (Naver Sentiment Movie Corpus v1.0, CC0): official 150K train (5% held out for validation) / 50K test",
    "imdb": "IMDb Large Movie Review Dataset (Maas et al. 2011): official 25K train (5% held out) / 20K of the official 25K test",
    "tatoeba": "Tatoeba sentence pairs via manythings.org (CC-BY 2.0 FR, attribution: www.manythings.org/anki and tatoeba.org), grouped leakage-free train/valid/test splits",
    "multi30k": "Multi30k task 1 (Elliott et al. 2016): official train / valid / test2016 (flickr)",
}


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / 2**20


def model_card(
    name: str,
    meta: dict[str, Any],
    test: dict[str, Any],
    valid: dict[str, Any],
    command: str,
    size_mb: float,
    notes: str = "",
) -> str:
    cfg, train = meta["model"], meta.get("training", {})
    tcfg = train.get("config", {})
    dataset = tcfg.get("dataset", "?")
    note = DATA_NOTES.get(dataset.split("-")[0], dataset)
    hours = train.get("seconds", 0) / 3600
    metric_lines = "\n".join(f"| {k} | {test[k]} |" for k in CARD_METRICS if k in test)
    signature = "".join(
        f"\n- sacrebleu `{k}`: `{test[k]}`" for k in ("bleu_signature", "chrf_signature") if k in test
    )
    decoding = f"\n- decoding: `{json.dumps(test['decoding'])}`" if "decoding" in test else ""
    arch = (
        f"d_model={cfg['d_model']}, n_heads={cfg['n_heads']}, encoder layers={cfg['n_layers']}"
        + (f", decoder layers={cfg['n_decoder_layers']}" if cfg["task"] == "translation" else "")
        + f", d_ff={cfg['d_ff']}, vocab={cfg['vocab_size']} (sentencepiece {tcfg.get('spm_model_type', 'unigram')}),"
        f" {'pre' if cfg['norm_first'] else 'post'}-norm, max_len={cfg['max_len']}"
    )
    head = train.get("ngram_head")
    if cfg.get("ngram") and head:
        arch += (
            f"; plus a hashed n-gram head (`{cfg['ngram']}`: word 1..{cfg['ngram'][1]}-grams and character"
            f" 1..{cfg['ngram'][3]}-grams in {cfg['ngram_buckets']:,} buckets) whose logits, weighted"
            f" {head['alpha']} (chosen on valid), add to the encoder's. Valid accuracy: encoder"
            f" {head['encoder_valid_accuracy']:.4f}, n-gram head {head['head_valid_accuracy']:.4f}"
        )
        command += f"\npython -m training ngram-head --run runs/{name} --spec {cfg['ngram']} --buckets {cfg['ngram_buckets']}"
    return f"""# {name}

From-scratch Transformer ({cfg["task"]}), trained on this project's CPU; no pretrained weights.

- **Data**: {note} (`{dataset}`).
- **Architecture**: {arch}.
- **Training**: {train.get("step", "?")} optimizer steps ({train.get("epoch", "?")} full epochs done), {hours:.1f} h wall time on a 2-core CPU (fp32, one
thread, sharing the CPU with other training runs).
- **Size**: {size_mb:.1f} MB on disk (fp16 safetensors + tokenizer).
- **Date**: {datetime.now(UTC).date().isoformat()}{f"{chr(10)}- **Notes**: {notes}" if notes else ""}

## Reproduce

```
{command}
python -m training ship --run runs/{name} --name {name}
```

## Test metrics

Measured with `{test.get("command", "")}` ({test.get("seconds", "?")} s on this CPU):

| metric | value |
|---|---|
{metric_lines}
{signature}{decoding}

Validation (best checkpoint): `{json.dumps({k: v for k, v in valid.items() if k != "n"})}`
"""


def write_card(dest: Path, name: str, task: str) -> None:
    """(Re)write a shipped checkpoint's README.md from its config.json and metrics.json."""
    metrics = json.loads((dest / "metrics.json").read_text())
    command = "".join(  # the runs this one starts from (distillation teachers, init_from) come first
        f"python -m training {task} {extra}  # a run that --preset={name} starts from\n"
        for extra in metrics.get("requires", [])
    )
    command += f"python -m training {task} --preset={name}  # or: make train-{name}"
    for extra in metrics.get("continued", []):  # later runs that continued the finished one
        command += f"\npython -m training {task} --preset={name} {extra}  # continues the run"
    (dest / "README.md").write_text(
        model_card(
            name,
            read_config(dest),
            metrics["test"],
            metrics["valid"],
            command,
            _size_mb(dest),
            metrics.get("note", ""),
        )
    )


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training ship", description=__doc__)
    p.add_argument("--run", type=Path, required=True, help="run directory holding best/")
    p.add_argument("--name", help="checkpoint name (default: the run directory name)")
    p.add_argument("--dest", type=Path, default=Path(__file__).resolve().parents[1] / "checkpoints")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--note", default="", help="free text for the model card (e.g. how the run was resumed)")
    p.add_argument(
        "--continued",
        action="append",
        default=[],
        metavar="ARGS",
        help="overrides of a later command that continued the finished preset run, as --continued='--epochs=13 ...'; "
        "listed in the card's Reproduce section, in order",
    )
    p.add_argument(
        "--requires",
        action="append",
        default=[],
        metavar="ARGS",
        help="arguments of a run the preset starts from (its teachers, init_from), as --requires='--preset=NAME'; "
        "listed first in the card's Reproduce section, in order",
    )
    args = p.parse_args(argv)
    best = args.run / "best"
    name = args.name or args.run.name
    meta = read_config(best)
    dataset = meta["training"]["config"]["dataset"]
    if dataset not in TEST_SETS:
        print(f"error: no test set known for dataset {dataset!r}; known: {sorted(TEST_SETS)}")
        return 2
    rel, fmt, _ = TEST_SETS[dataset]
    valid = json.loads((best / "metrics.json").read_text()).get("valid", {})
    dest = args.dest / name
    if (dest / "metrics.json").exists() and not args.force:  # select on validation, never on test
        old = json.loads((dest / "metrics.json").read_text()).get("valid", {}).get("metric", float("-inf"))
        if valid.get("metric", float("-inf")) <= old:
            print(
                f"not shipping: validation metric {valid.get('metric')} does not improve on the shipped {old}"
            )
            return 1
    data = resolve_data_dir(args.data_dir) / rel
    test = evaluate_run(best, data, fmt, beam_size=4)
    test["command"] = (
        f"python -m training evaluate --checkpoint checkpoints/{name} --data ../shared/data/{rel} --format {fmt}"
        + (" --beam-size 4" if fmt in ("tatoeba", "multi30k") else "")
    )
    test.pop("checkpoint", None)
    test.pop("data", None)
    tmp = args.dest / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(best, tmp)
    (tmp / "metrics.json").write_text(
        json.dumps(
            {"test": test, "valid": valid}
            | ({"note": args.note} if args.note else {})
            | ({"continued": args.continued} if args.continued else {})
            | ({"requires": args.requires} if args.requires else {}),
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )
    write_card(tmp, name, "sentiment" if meta["task"] == "sentiment" else "translate")
    if "seconds" not in meta.get("training", {}):  # runs started before wall time was recorded: file times
        tok = args.run / "tokenizer.model"
        meta["training"]["seconds"] = round((best / "config.json").stat().st_mtime - tok.stat().st_mtime)
        (tmp / "config.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    load_checkpoint(tmp)  # the new directory must load before it replaces the shipped one
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    print(json.dumps({"shipped": str(dest), **{k: v for k, v in test.items() if k != "decoding"}}))
    return 0

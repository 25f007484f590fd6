"""Ship a run's best checkpoint: evaluate on the test split, write metrics.json and the model card.

  python -m training ship --run runs/translate-fr-en [--name translate-fr-en] [--dest checkpoints]
  python -m training card --checkpoint checkpoints/translate-fr-en   # rewrite the card from the files
  python -m training card --checkpoint checkpoints/sentiment-en --measure  # measure test and probe again first

Refuses to replace a shipped checkpoint unless the new validation metric is better (`--force` overrides);
the test split is only measured, never used to choose. A name with a recipe (training/recipes.py) ships only
the run that recipe makes: its card prints the recipe's commands.
"""

from __future__ import annotations

import argparse
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model import load_checkpoint
from model.checkpoint import TOKENIZER, WEIGHTS, read_config
from training.config import parse_overrides, saved_value
from training.data import resolve_data_dir
from training.evaluate import run as evaluate_run
from training.recipes import RECIPES, command_lines, commands

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
# a classifier's hand-labelled short-text probe, by source language (training/probes/README.md)
PROBES = Path(__file__).resolve().parent / "probes"
DATA_NOTES = {
    "nsmc": "NSMC (Naver Sentiment Movie Corpus v1.0, CC0): official 150K train (5% held out for validation) / 50K test",
    "imdb": "IMDb Large Movie Review Dataset (Maas et al. 2011): official 25K train (5% held out) / 20K of the official 25K test",
    "tatoeba": "Tatoeba sentence pairs via manythings.org (CC-BY 2.0 FR, attribution: www.manythings.org/anki and tatoeba.org), grouped leakage-free train/valid/test splits",
    "multi30k": "Multi30k task 1 (Elliott et al. 2016): official train / valid / test2016 (flickr)",
}


# how a run was executed, not what it computes (threads varied between the segments of one shipped run)
RUN_CONTROL = ("threads", "save_every", "log_every", "data_dir")


def recipe_diff(name: str, recorded: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{key: (recorded, recipe)} where a run's recorded TrainConfig differs from recipe `name`'s last command
    (with the run's own runs directory); keys newer than the run count with the value it ran with."""
    chain = commands(RECIPES[name], recorded.get("out_dir", "runs"))
    last = [argv for argv in chain if argv[0] in ("sentiment", "translate")][-1]
    want = json.loads(json.dumps(parse_overrides(last[1:]).to_dict()))  # tuples as JSON lists
    return {
        k: (saved_value(recorded, k), v)
        for k, v in want.items()
        if k not in RUN_CONTROL and saved_value(recorded, k) != v
    }


def portable(config: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded TrainConfig without the training machine's paths: the runs directory becomes `runs`,
    the data directory the default."""
    runs = config.get("out_dir", "runs").rstrip("/") + "/"
    out = config | {"out_dir": "runs", "data_dir": ""}
    for key in ("teachers", "init_from", "tokenizer_from"):
        if config.get(key):
            out[key] = ",".join(
                "runs/" + p.removeprefix(runs) if p.startswith(runs) else p for p in config[key].split(",")
            )
    return out


def _size_mb(path: Path) -> float:
    return sum((path / f).stat().st_size for f in (WEIGHTS, TOKENIZER)) / 2**20


def _rounded(metrics: dict[str, Any], digits: int = 4) -> dict[str, Any]:
    return {k: round(v, digits) if isinstance(v, float) else v for k, v in metrics.items()}


def _reproduce(name: str) -> str:
    """The card's Reproduce section: the recipe's chain of commands, or where the settings are."""
    if name not in RECIPES:
        return "No recipe in training/recipes.py: the run's settings are `training.config` in config.json."
    chain = "\n".join(command_lines(RECIPES[name]))
    return (
        f"`python -m training reproduce {name}` runs, in order (each command is resumable;"
        f" `--dry-run` prints them):\n\n```\n{chain}\n```"
    )


def model_card(dest: Path, name: str) -> str:
    """A shipped checkpoint's README.md, from its config.json, metrics.json and recipe."""
    meta, metrics = read_config(dest), json.loads((dest / "metrics.json").read_text())
    test, valid = metrics["test"], metrics["valid"]
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
    notes = RECIPES[name].note if name in RECIPES else ""
    return f"""# {name}
{_use(meta.get("card"))}
From-scratch Transformer ({cfg["task"]}), trained on this project's CPU; no pretrained weights.

- **Data**: {note} (`{dataset}`).
- **Architecture**: {arch}.
- **Training**: {train.get("step", "?")} optimizer steps ({train.get("epoch", "?")} full epochs done), {hours:.1f} h wall time on a 2-core CPU (fp32, one
thread, sharing the CPU with other training runs).
- **Size**: {_size_mb(dest):.1f} MB on disk (fp16 safetensors + tokenizer).
- **Date**: {metrics.get("shipped", "?")}{f"{chr(10)}- **Notes**: {notes}" if notes else ""}

## Reproduce

{_reproduce(name)}

## Test metrics

Measured with `{test.get("command", "")}` ({test.get("seconds", "?")} s on this CPU):

| metric | value |
|---|---|
{metric_lines}
{signature}{decoding}

Validation (best checkpoint): `{json.dumps({k: v for k, v in valid.items() if k != "n"})}`
{_calibration(meta, test)}{_probe(metrics.get("probe"))}{_limits(name)}"""


def _calibration(meta: dict[str, Any], test: dict[str, Any]) -> str:
    """A calibrated classifier's card section: its temperature and the ECE before and after on valid and test."""
    record = meta.get("training", {}).get("calibration")
    if not record or "ece_at_t1" not in test:
        return ""
    t = record["temperature"]
    return f"""
## Calibration

Scores are softmax(logits / T) with T = {t}, fitted on the validation split ({record["n"]:,} texts) by
`python -m training calibrate` (temperature scaling: the T of least negative log-likelihood). A temperature
changes how sure the model says it is, never a label. Expected calibration error (ECE, {record["bins"]}
equal-width bins of the top score; 0 is a score that is right as often as it says):

| split | ECE at T = 1 (as trained) | ECE at T = {t} (served) |
|---|---:|---:|
| valid | {record["ece_before"]} | {record["ece_after"]} |
| test | {test["ece_at_t1"]} | {test["ece"]} |
"""


def _probe(probe: dict[str, Any] | None) -> str:
    """A classifier's card section: accuracy and scores on its language's hand-labelled short-text probe."""
    if not probe:
        return ""
    rows = "\n".join(f"| {k} | {probe['n_by_kind'][k]} | {a} |" for k, a in probe["accuracy_by_kind"].items())
    at_t1 = f" ({probe['mean_score_wrong_at_t1']} at T = 1)" if "mean_score_wrong_at_t1" in probe else ""
    ece_t1 = f" ({probe['ece_at_t1']} at T = 1)" if "ece_at_t1" in probe else ""
    return f"""
## Short texts

{probe["n"]} short texts written and labelled by hand (`training/probes/`, its README says how), never
trained, selected or calibrated on; measured with `{probe["command"]}`:

| kind | texts | accuracy |
|---|---:|---:|
{rows}
| all | {probe["n"]} | {probe["accuracy"]} |

Mean score of the wrong answers: {probe["mean_score_wrong"]}{at_t1}; of the right answers:
{probe["mean_score_right"]}. ECE on these texts: {probe["ece"]}{ece_t1}.
"""


def _limits(name: str) -> str:
    """The card's Limits section: the recipe's caveats, one bullet each."""
    recipe = RECIPES.get(name)
    if recipe is None or not recipe.caveats:
        return ""
    return "\n## Limits\n\n" + "".join(f"- {c}\n" for c in recipe.caveats)


def measure(checkpoint: Path, name: str, dataset: str, data_dir: str | None = None) -> dict[str, Any]:
    """metrics.json's measured sections: "test" (the dataset's test split) and, for a classifier with a probe
    in its language, "probe"; each with the command that measures it again on the shipped checkpoint `name`."""
    rel, fmt, _ = TEST_SETS[dataset]
    test = evaluate_run(checkpoint, resolve_data_dir(data_dir) / rel, fmt, beam_size=4)
    test["command"] = (
        f"python -m training evaluate --checkpoint checkpoints/{name} --data ../shared/data/{rel} --format {fmt}"
        + (" --beam-size 4" if fmt in ("tatoeba", "multi30k") else "")
    )
    out = {"test": test}
    langs = read_config(checkpoint)["model"].get("source_langs", [])
    if fmt in ("nsmc", "imdb") and langs and (probe := PROBES / f"{langs[0]}.jsonl").is_file():
        out["probe"] = evaluate_run(checkpoint, probe, "probe")
        out["probe"]["command"] = (
            f"python -m training evaluate --checkpoint checkpoints/{name} --data training/probes/{probe.name}"
            " --format probe"
        )
    for res in out.values():
        res.pop("checkpoint", None)
        res.pop("data", None)
    return {k: _rounded(v) for k, v in out.items()}


def remeasure(dest: Path, name: str, data_dir: str | None = None) -> None:
    """Measure a shipped checkpoint's test split and probe again into its metrics.json (after `python -m
    training calibrate` changed its scores), keeping its validation metrics and date."""
    meta = read_config(dest)
    metrics = json.loads((dest / "metrics.json").read_text())
    metrics |= measure(dest, name, meta["training"]["config"]["dataset"], data_dir)
    (dest / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")


def card_info(name: str) -> dict[str, Any] | None:
    """config.json's "card" (what /models shows): the recipe's training domain and known limits."""
    recipe = RECIPES.get(name)
    if recipe is None or not recipe.domain:
        return None
    limits = [{"kind": k, "source": s, "output": o} for k, s, o in recipe.limits]
    return {"domain": recipe.domain, "limits": limits}


def _use(card: dict[str, Any] | None) -> str:
    """The card's "Intended use" section, first: what the model was trained on and what it gets wrong."""
    if not card:
        return ""
    examples = "\n".join(f"- {x['kind']}: `{x['source']}` → `{x['output']}`" for x in card.get("limits", []))
    return f"""
**Intended use.** Trained on {card["domain"]}

Known limits, with what this model answers (beam 4):

{examples}
"""


def write_card(dest: Path, name: str | None = None) -> Path:
    """(Re)write a shipped checkpoint's README.md from its files and its recipe (and config.json's "card"
    from the recipe: the only change to the checkpoint's files); returns the card's path."""
    name = name or dest.name
    if (info := card_info(name)) is not None:
        meta = read_config(dest)
        if meta.get("card") != info:
            meta["card"] = info
            (dest / "config.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    card = dest / "README.md"
    card.write_text(model_card(dest, name))
    return card


def card_cli(argv: list[str] | None = None) -> int:
    """`python -m training card --checkpoint DIR`: regenerate a shipped checkpoint's README.md."""
    p = argparse.ArgumentParser(prog="python -m training card", description=write_card.__doc__)
    p.add_argument("--checkpoint", type=Path, required=True, help="a shipped checkpoint directory")
    p.add_argument("--name", help="its name (default: the directory name), the recipe the card prints")
    p.add_argument(
        "--measure",
        action="store_true",
        help="measure the test split and the probe again first (metrics.json), as ship does",
    )
    p.add_argument(
        "--data-dir", default=None, help="with --measure: default $TRAINING_DATA_DIR, else ../shared/data"
    )
    args = p.parse_args(argv)
    if args.measure:
        remeasure(args.checkpoint, args.name or args.checkpoint.name, args.data_dir)
    print(write_card(args.checkpoint, args.name))
    return 0


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training ship", description=__doc__)
    p.add_argument("--run", type=Path, required=True, help="run directory holding best/")
    p.add_argument("--name", help="checkpoint name (default: the run directory name)")
    p.add_argument("--dest", type=Path, default=Path(__file__).resolve().parents[1] / "checkpoints")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--force", action="store_true", help="ship even if validation does not improve")
    args = p.parse_args(argv)
    best = args.run / "best"
    name = args.name or args.run.name
    meta = read_config(best)
    dataset = meta["training"]["config"]["dataset"]
    if dataset not in TEST_SETS:
        print(f"error: no test set known for dataset {dataset!r}; known: {sorted(TEST_SETS)}")
        return 2
    if name in RECIPES and (diff := recipe_diff(name, meta["training"]["config"])):
        print(
            f"error: the run is not recipe {name!r} (training/recipes.py), whose card would be wrong: {diff}"
        )
        return 2
    valid = json.loads((best / "metrics.json").read_text()).get("valid", {})
    dest = args.dest / name
    if (dest / "metrics.json").exists() and not args.force:  # select on validation, never on test
        old = json.loads((dest / "metrics.json").read_text()).get("valid", {}).get("metric", float("-inf"))
        if valid.get("metric", float("-inf")) <= old:
            print(
                f"not shipping: validation metric {valid.get('metric')} does not improve on the shipped {old}"
            )
            return 1
    measured = measure(best, name, dataset, args.data_dir)
    test = measured["test"]
    tmp = args.dest / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(best, tmp)
    shipped = {**measured, "valid": _rounded(valid), "shipped": datetime.now(UTC).date().isoformat()}
    (tmp / "metrics.json").write_text(json.dumps(shipped, indent=2, ensure_ascii=False) + "\n")
    if "seconds" not in meta["training"]:  # runs started before wall time was recorded: file times
        tok = args.run / "tokenizer.model"
        meta["training"]["seconds"] = round((best / "config.json").stat().st_mtime - tok.stat().st_mtime)
    meta["training"]["config"] = portable(meta["training"]["config"])  # not in config.json's checksums
    (tmp / "config.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    write_card(tmp, name)
    load_checkpoint(tmp)  # the new directory must load before it replaces the shipped one
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    print(json.dumps({"shipped": str(dest), **{k: v for k, v in test.items() if k != "decoding"}}))
    return 0

"""Typed training configuration with `--d-model 128` overrides (nanoGPT's configurator, without exec)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

# Shared recipe of the translators: shared 8k sentencepiece vocabulary, tied embeddings, pre-norm.
_TRANSLATE: dict[str, Any] = {
    "task": "translation",
    "vocab_size": 8000,
    "d_model": 256,
    "n_heads": 4,
    "n_layers": 4,
    "n_decoder_layers": 3,
    "d_ff": 1024,
    "batch_tokens": 6000,
    "lr": 8e-4,
    "warmup_steps": 800,
    "epochs": 12,
    "max_src_len": 64,
    "max_tgt_len": 64,
}
_SENTIMENT_KO: dict[str, Any] = {
    "task": "sentiment",
    "dataset": "nsmc",
    "vocab_size": 16000,
    "max_src_len": 128,
    "d_model": 256,
    "n_layers": 4,
    "d_ff": 1024,
    "n_heads": 4,
    "dropout": 0.1,
    "batch_tokens": 12288,
    "lr": 5e-4,
    "epochs": 3,
    "warmup_steps": 300,
    "eval_every": 200,
}
_SENTIMENT_EN: dict[str, Any] = {
    "task": "sentiment",
    "dataset": "imdb",
    "vocab_size": 16000,
    "max_src_len": 512,  # head + tail of long reviews (256: test accuracy 0.879 -> 512: 0.885)
    "d_model": 128,
    "n_layers": 2,
    "d_ff": 512,
    "n_heads": 4,
    "dropout": 0.1,
    "batch_tokens": 16384,
    "lr": 1e-3,
    "epochs": 5,
    "warmup_steps": 100,
    "truncation": "head_tail",
    "eval_every": 150,
    "average_last": 4,
    "patience": 30,
}
# First distillation round: a classifier fine-tuned on the gold labels plus two teachers' mean probabilities
# on unlabeled text (knowledge distillation, see training/distill.py).
_KO_KD: dict[str, Any] = {
    **_SENTIMENT_KO,
    "teachers": "{out_dir}/sentiment-ko-base/best,{out_dir}/sentiment-ko-mlm/best",
    "distill_dataset": "nsmc-unlabeled",
    "distill_examples": 300000,  # of the 629K unlabeled reviews: 2 epochs fit about 1.2 h of one core
    "init_from": "{out_dir}/sentiment-ko-mlm/best",
    "tokenizer_from": "{out_dir}/sentiment-ko-mlm/tokenizer.model",
    "epochs": 2,
    "lr": 3e-4,
    "warmup_steps": 100,
    "eval_every": 150,
    "average_last": 3,
}
_EN_KD: dict[str, Any] = {
    **_SENTIMENT_EN,
    "teachers": "{out_dir}/sentiment-en-base/best,{out_dir}/sentiment-en-mlm/best",
    "distill_dataset": "imdb-text",  # the train reviews again, now with the teachers' soft labels
    "init_from": "{out_dir}/sentiment-en-base/best",
    "tokenizer_from": "{out_dir}/sentiment-en-base/tokenizer.model",
    "epochs": 2,
    "lr": 3e-4,
    "warmup_steps": 50,
    "eval_every": 100,
}
# Presets: the shipped checkpoints are reproduced by `python -m training <task> --preset=<name>`
# (`make train-<name>` also trains the runs a preset starts from, see the Makefile).
PRESETS: dict[str, dict[str, Any]] = {
    # Sentiment teachers: from scratch, and with a masked-LM phase on unlabeled in-domain text first.
    "sentiment-ko-base": _SENTIMENT_KO,
    "sentiment-ko-mlm": {  # continued with --epochs=7
        **_SENTIMENT_KO,
        "pretrain_dataset": "nsmc-unlabeled",
        "pretrain_steps": 300,
        "warmup_steps": 100,
        "average_last": 3,
    },
    "sentiment-en-base": _SENTIMENT_EN,
    "sentiment-en-mlm": {
        **_SENTIMENT_EN,
        "epochs": 3,
        "pretrain_dataset": "imdb-text",
        "pretrain_steps": 1500,
        "pretrain_epochs": 3,
    },
    "sentiment-ko-kd": _KO_KD,
    # The shipped classifiers. sentiment-ko: the first-round student again, distilled from itself and a
    # hashed n-gram model (training/ngram_teacher.py), whose errors differ from the Transformer's.
    "sentiment-ko": {
        **_KO_KD,
        "teachers": "{out_dir}/sentiment-ko-kd/best,ngram-w3c4",
        "init_from": "{out_dir}/sentiment-ko-kd/best",
        "distill_examples": 0,  # all 622K unlabeled reviews outside valid, one epoch (1,039 steps)
        "epochs": 1,
    },
    "sentiment-en": _EN_KD,  # a second round with an n-gram teacher did not improve it (no unlabeled reviews)
    # epochs fit the CPU time of two sessions (the shipped runs were resumed with these shorter schedules)
    "translate-fr-en": {**_TRANSLATE, "dataset": "tatoeba-fr-en", "epochs": 6},
    "translate-es-en": {**_TRANSLATE, "dataset": "tatoeba-es-en", "epochs": 8},
    "translate-de-en": {
        **_TRANSLATE,
        "dataset": "multi30k-de-en",
        "n_layers": 3,
        "epochs": 10,
        "batch_tokens": 4000,  # 29K pairs: more, smaller updates per epoch
        "dropout": 0.2,
        "warmup_steps": 400,
    },
}


@dataclass(frozen=True)
class TrainConfig:
    task: Literal["sentiment", "translation"]
    dataset: str  # a training.data.load_split name; comma-separated for several corpora
    name: str = ""  # run / checkpoint name, default: the preset or the dataset
    out_dir: str = "runs"  # runs/<name>/{state.pt,best/,metrics.jsonl,curves.png,train.log}
    data_dir: str = ""  # default: $TRAINING_DATA_DIR or ../shared/data
    seed: int = 1234
    # tokenizer
    vocab_size: int = 16000
    spm_model_type: Literal["unigram", "bpe"] = "unigram"
    # architecture (model.ModelConfig names)
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4
    n_decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    attn_dropout: float = 0.0
    norm_first: bool = True
    pooling: Literal["mean", "cls"] = "mean"
    max_src_len: int = 128  # tokens; longer inputs are truncated (see `truncation`)
    max_tgt_len: int = 128
    truncation: Literal["head", "head_tail"] = (
        "head"  # head_tail keeps the first third and the last two thirds
    )
    # optimisation
    batch_tokens: int = 8192  # padded tokens per batch (source + target)
    lr: float = 7e-4
    min_lr_ratio: float = 0.02
    warmup_steps: int = 2000
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    label_smoothing: float = 0.1
    grad_clip: float = 1.0
    epochs: int = 30
    max_steps: int = 0  # 0 = epochs decide; otherwise stop after this many optimizer steps
    stop_at_step: int = 0  # >0: pause (resumable) after this step, where a recipe switches schedules
    patience: int = 5  # early stopping: evaluations without improvement
    bf16: bool = False  # autocast; on CPUs without avx512_bf16/AMX it is ~3x slower than fp32 (measured)
    # evaluation
    eval_every: int = 0  # optimizer steps; 0 = once per epoch
    log_every: int = 50  # optimizer steps between metrics.jsonl lines
    save_every: int = 500  # optimizer steps between resumable state saves (besides every evaluation)
    eval_max_examples: int = 2000  # of the valid split
    eval_beam_size: int = 1  # greedy during training is ~4x cheaper; the evaluate CLI uses 4
    average_last: int = 0  # >1: at each evaluation, the mean of the last N evaluated weights may become best/
    # masked-LM pretraining of the sentiment encoder on unlabeled in-domain text
    pretrain_dataset: str = (
        ""  # e.g. nsmc-unlabeled; runs first, in runs/<name>/mlm, then fine-tuning starts from it
    )
    pretrain_steps: int = 0
    pretrain_epochs: int = 0  # >0: that phase also stops after this many epochs (as before session 5)
    pretrain_batch_tokens: int = 16384
    objective: Literal["supervised", "mlm"] = "supervised"  # set internally for the pretraining phase
    mask_prob: float = 0.15
    # knowledge distillation (classifiers): teachers' mean probabilities on unlabeled text as extra targets
    teachers: str = ""  # comma-separated checkpoint dirs or n-gram teachers (training/ngram_teacher.py)
    distill_dataset: str = ""  # unlabeled text (e.g. nsmc-unlabeled); valid-split texts are left out
    distill_examples: int = 0  # a seeded sample of this many texts; 0 = all
    tokenizer_from: str = ""  # reuse this sentencepiece model instead of training one
    init_from: str = ""  # a checkpoint dir whose matching weights initialise this model
    dry_run: bool = False  # one batch of train and eval, then stop (CI smoke)
    threads: int = 0  # torch.set_num_threads; 0 = torch's default

    def __post_init__(self) -> None:
        longest = self.max_src_len + (self.max_tgt_len if self.task == "translation" else 0)
        if self.batch_tokens < longest:
            raise ValueError(
                f"batch_tokens={self.batch_tokens} must hold one longest example ({longest} tokens)"
            )

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / (self.name or self.dataset.replace(",", "+"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_RUN_PATHS = ("teachers", "init_from", "tokenizer_from")


def _convert(value: str, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if tp is bool:
        if value.lower() in ("1", "true", "yes"):
            return True
        if value.lower() in ("0", "false", "no"):
            return False
        raise ValueError(f"expected a boolean, got {value!r}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ValueError(f"expected one of {typing.get_args(tp)}, got {value!r}")
        return value
    if origin is tuple:
        return tuple(float(v) for v in value.split(","))
    if origin in (typing.Union, types.UnionType):
        return value
    return tp(value)


def option(field: str) -> str:
    """A TrainConfig field's command-line option: d_model -> --d-model."""
    return "--" + field.replace("_", "-")


OPTIONS: dict[str, str] = {option(f.name): f.name for f in dataclasses.fields(TrainConfig)} | {
    "--preset": "preset",
    "--config": "config",
}


def _pairs(args: list[str], hints: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, value) of `--key value` / `--key=value` args; a boolean `--key` alone means true."""
    pairs, i = [], 0
    while i < len(args):
        key, eq, value = args[i].partition("=")
        if key not in OPTIONS:
            if not key.startswith("--"):
                raise ValueError(f"expected --key value or --key=value, got {args[i]!r}")
            near = difflib.get_close_matches(key, OPTIONS, n=1)
            hint = f"did you mean {near[0]}?" if near else "see --help"
            raise ValueError(f"Unknown config key: {key} ({hint})")
        name, i = OPTIONS[key], i + 1
        if not eq:
            alone = i == len(args) or args[i].startswith("--")
            if hints.get(name) is bool and alone:
                value = "true"
            elif alone:
                raise ValueError(f"{key} needs a value")
            else:
                value, i = args[i], i + 1
        pairs.append((name, value))
    return pairs


def parse_overrides(args: list[str], base: dict[str, Any] | None = None) -> TrainConfig:
    """Build a TrainConfig from `--d-model 128` / `--d-model=128` args, `--preset NAME` and `--config FILE`."""
    # precedence: base (the CLI's task) < preset < --config file < explicit --key value
    values: dict[str, Any] = dict(base or {})
    explicit: dict[str, Any] = {}
    hints = typing.get_type_hints(TrainConfig)
    for name, value in _pairs(args, hints):
        if name == "preset":
            if value not in PRESETS:
                raise ValueError(f"unknown preset {value!r}; choose from {sorted(PRESETS)}")
            values.update(PRESETS[value], name=value)
        elif name == "config":
            values.update(json.loads(Path(value).read_text()))
        else:
            try:
                explicit[name] = _convert(value, hints[name])
            except ValueError as e:
                raise ValueError(f"{option(name)}: {e}") from e
    values.update(explicit)
    for key in _RUN_PATHS:  # presets name other runs' outputs as {out_dir}/<run>/...
        if isinstance(values.get(key), str):
            values[key] = values[key].replace("{out_dir}", str(values.get("out_dir", "runs")))
    missing = [option(k) for k in ("task", "dataset") if k not in values]
    if missing:
        raise ValueError(f"missing required settings: {', '.join(missing)} (or use --preset NAME)")
    return TrainConfig(**values)


def usage(command: str) -> str:
    """`python -m training sentiment|translate --help`: the options (one per TrainConfig field) and presets."""
    lines = [
        f"usage: python -m training {command} [--preset NAME] [--config FILE] [--key value | --key=value ...]",
        f"presets: {', '.join(sorted(PRESETS))}",
        "options (TrainConfig fields; a boolean option alone means true):",
    ]
    for f in dataclasses.fields(TrainConfig):
        default = "(required)" if f.default is dataclasses.MISSING else repr(f.default)
        lines.append(f"  {option(f.name):26} {default}")
    return "\n".join(lines)


def cli(argv: list[str], command: str) -> int:
    """`python -m training sentiment|translate ...`: parse, train (or resume), print the best checkpoint."""
    if any(a in ("-h", "--help") for a in argv):
        print(usage(command))
        return 0
    task = "sentiment" if command == "sentiment" else "translation"
    try:
        cfg = parse_overrides(argv, {"task": task})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cfg.task != task:
        print(f"error: preset/config is a {cfg.task} run, not {task}", file=sys.stderr)
        return 2
    from training.train import train  # the training loop imports this module

    print(train(cfg))
    return 0


def sentiment_cli(argv: list[str]) -> int:
    return cli(argv, "sentiment")


def translate_cli(argv: list[str]) -> int:
    return cli(argv, "translate")

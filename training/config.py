"""Typed training configuration with `--d-model 128` overrides (nanoGPT's configurator, without exec)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from training.recipes import PRESETS


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
    spm_split_digits: bool = True  # each digit its own piece
    spm_byte_fallback: bool = True  # unknown characters as UTF-8 byte pieces (from 1024 pieces up): no <unk>
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
    bf16: bool = False  # autocast; on CPUs without avx512_bf16/AMX it is emulated, slower than fp32
    # evaluation
    eval_every: int = 0  # optimizer steps; 0 = once per epoch
    log_every: int = 50  # optimizer steps between metrics.jsonl lines
    save_every: int = 500  # optimizer steps between resumable state saves (besides every evaluation)
    eval_max_examples: int = 2000  # of the valid split
    eval_beam_size: int = 1  # greedy: evaluations stay cheap during training; the evaluate CLI uses 4
    average_last: int = 0  # >1: at each evaluation, the mean of the last N evaluated weights may become best/
    # masked-LM pretraining of the sentiment encoder on unlabeled in-domain text
    pretrain_dataset: str = (
        ""  # e.g. nsmc-unlabeled; runs first, in runs/<name>/mlm, then fine-tuning starts from it
    )
    pretrain_steps: int = 0
    pretrain_epochs: int = 0  # >0: that phase also stops after this many epochs (else pretrain_steps alone)
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


# a saved config (state.pt, a checkpoint's config.json) older than a field: the value it ran with, where that
# differs from the field's default (tokenizers were trained without split digits or byte fallback before)
LEGACY_VALUES: dict[str, Any] = {"spm_split_digits": False, "spm_byte_fallback": False}


def saved_value(saved: dict[str, Any], name: str) -> Any:
    """Field `name` of a saved TrainConfig dict; a field newer than it counts with the value it ran with."""
    if name in saved:
        return saved[name]
    if name in LEGACY_VALUES:
        return LEGACY_VALUES[name]
    return next(f.default for f in dataclasses.fields(TrainConfig) if f.name == name)


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
    missing = [option(k) for k in ("task", "dataset") if k not in values]
    if missing:
        raise ValueError(f"missing required settings: {', '.join(missing)} (or use --preset NAME)")
    return TrainConfig(**values)


def usage(command: str) -> str:
    """`python -m training sentiment|translate --help`: the options (one per TrainConfig field) and presets."""
    lines = [
        f"usage: python -m training {command} [--preset NAME] [--config FILE] [--key value | --key=value ...]",
        f"presets (training/recipes.py): {', '.join(sorted(PRESETS))}",
        "options (TrainConfig fields; a boolean option alone means true):",
    ]
    for f in dataclasses.fields(TrainConfig):
        default = "(required)" if f.default is dataclasses.MISSING else repr(f.default)
        default = f"{command} (the command)" if f.name == "task" else default
        lines.append(f"  {option(f.name):26} {default}")
    return "\n".join(lines)

"""Checkpoint directory format: config.json + model.safetensors + sentencepiece model + README.md + metrics.json.

An imported Marian model (training/import_marian.py) adds a target sentencepiece model and vocab.json
(config.json "target_tokenizer", "vocab": model.tokenizer.PairTokenizer) and names its "origin"; an
imported XLM-R classifier (training/import_xlmr.py) has "tokenizer_ids": "fairseq" (FairseqTokenizer).

Loading reads only JSON, safetensors and the sentencepiece protobuf: nothing is ever unpickled. Every file's
size and sha256 are recorded in config.json, so a truncated or swapped file is named precisely at load.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn

from model.classifier import SentimentClassifier
from model.config import ModelConfig
from model.files import (  # noqa: F401 (re-exported: model.checkpoint is where callers look)
    CONFIG,
    FORMAT,
    TARGET_TOKENIZER,
    TOKENIZER,
    VOCAB,
    WEIGHTS,
    CheckpointError,
    _read,
    _sha256,
    load_tokenizer,
    read_config,
)
from model.quantize import quantize as quantize_linears
from model.tokenizer import PairTokenizer, Tokenizer
from model.translator import Translator
from model.xlmr import XLMRClassifier


@dataclass
class LoadedModel:
    name: str
    path: Path
    config: ModelConfig
    model: SentimentClassifier | Translator
    tokenizer: Tokenizer | PairTokenizer
    meta: dict[str, Any] = field(default_factory=dict)  # the whole config.json
    sha256: str = ""  # of model.safetensors

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def build_model(cfg: ModelConfig, init: bool = True) -> SentimentClassifier | Translator:
    if cfg.architecture == "xlm-roberta":
        return XLMRClassifier(cfg, init)
    return SentimentClassifier(cfg, init) if cfg.task == "sentiment" else Translator(cfg, init)


def expected_shapes(cfg: ModelConfig) -> dict[str, torch.Size]:
    """The shape of every tensor a checkpoint of `cfg` holds (tied aliases once, first name wins), from a
    model built on the meta device: nothing is allocated, so a config.json that asks for absurd sizes costs
    nothing before the weights file can contradict it."""
    with torch.device("meta"):
        skeleton = build_model(cfg, init=False)
    seen: set[int] = set()
    out = {}
    for name, t in skeleton.state_dict(keep_vars=True).items():  # a tied weight is one Parameter object
        if id(t) not in seen:
            seen.add(id(t))
            out[name] = t.shape
    return out


def unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict without aliases of tied weights (safetensors refuses shared storage); first name wins."""
    seen: set[int] = set()
    out = {}
    for name, t in model.state_dict().items():
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        out[name] = t
    return out


def save_checkpoint(
    path: str | Path,
    model: SentimentClassifier | Translator,
    tokenizer_path: str | Path,
    *,
    dtype: torch.dtype = torch.float16,
    training: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    card: str | None = None,
    target_tokenizer_path: str | Path | None = None,
    vocab: dict[str, int] | None = None,
    origin: str | None = None,
    tokenizer_ids: str | None = None,
) -> Path:
    """Write a checkpoint directory (weights cast to `dtype`); returns its path. target_tokenizer_path and
    vocab: a PairTokenizer's target model and shared vocabulary; origin: where the weights come from
    ("trained" when None); tokenizer_ids="fairseq": the sentencepiece ids shifted as XLM-R's (FairseqTokenizer)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous()
        for k, v in unique_state(model).items()
    }
    safetensors.torch.save_file(tensors, str(path / WEIGHTS), metadata={"format": FORMAT})
    (path / WEIGHTS).chmod(0o644)  # safetensors writes 0600; a service user must be able to read it
    if Path(tokenizer_path).resolve() != (path / TOKENIZER).resolve():
        shutil.copyfile(tokenizer_path, path / TOKENIZER)
    names = [WEIGHTS, TOKENIZER]
    if target_tokenizer_path is not None and vocab is not None:
        shutil.copyfile(target_tokenizer_path, path / TARGET_TOKENIZER)
        (path / VOCAB).write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n")
        names += [TARGET_TOKENIZER, VOCAB]
    files = {}
    for name in names:
        data = (path / name).read_bytes()
        files[name] = {"bytes": len(data), "sha256": _sha256(data)}
    config = {
        "format": FORMAT,
        "task": model.cfg.task,
        "model": model.cfg.to_dict(),
        "dtype": str(dtype).removeprefix("torch."),
        "tokenizer": TOKENIZER,
        **({"target_tokenizer": TARGET_TOKENIZER, "vocab": VOCAB} if len(names) > 2 else {}),
        **({"origin": origin} if origin else {}),
        **({"tokenizer_ids": tokenizer_ids} if tokenizer_ids else {}),
        "files": files,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "training": training or {},
    }
    (path / CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (path / "metrics.json").write_text(json.dumps(metrics or {}, indent=2) + "\n")
    if card is not None:
        (path / "README.md").write_text(card)
    return path


class OverBudget(CheckpointError):
    """A checkpoint larger than the memory a model may take."""


def check_budget(path: Path, expected: dict[str, torch.Size], dtype: torch.dtype, max_bytes: int) -> None:
    """CheckpointError unless the model fits `max_bytes`: its parameters in `dtype` (from config.json's
    shapes) and its weights file, which loading holds in memory beside them."""
    params = sum(shape.numel() for shape in expected.values()) * dtype.itemsize
    weights = path / WEIGHTS
    size = weights.stat().st_size if weights.is_file() else 0
    if params > max_bytes or size > max_bytes:
        what = f"{params:,} bytes of parameters in {dtype}".replace("torch.", "")
        raise OverBudget(
            f"{path / CONFIG}: the model takes {what} and a {size:,}-byte weights file, over the budget of "
            f"{max_bytes:,} bytes per model"
        )


def load_checkpoint(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
    max_bytes: int | None = None,
) -> LoadedModel:
    """Load a checkpoint directory into an eval-mode model on `device` (dtype default: float32);
    quantize="int8": dynamic int8 Linear layers (model.quantize; float32 on CPU only). max_bytes: the memory
    a model may take (`check_budget`), refused before its weights file is read."""
    path = Path(path)
    meta = read_config(path)
    try:
        cfg = ModelConfig.from_dict(meta["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path / CONFIG}: invalid 'model' section ({e})") from e
    files = meta.get("files", {})
    tokenizer = load_tokenizer(path, meta, cfg)
    expected = expected_shapes(cfg)  # on the meta device: nothing allocated yet
    if max_bytes is not None:
        check_budget(path, expected, dtype or torch.float32, max_bytes)
    data, digest = _read(path, WEIGHTS, files)  # digest: hashed once, checked and reported
    try:
        tensors = safetensors.torch.load(data)
    except Exception as e:  # safetensors raises its own SafetensorError on a bad header or short body
        raise CheckpointError(f"{path / WEIGHTS}: not a valid safetensors file ({e})") from e
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path / WEIGHTS}: tensors do not match config.json: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for k, shape in expected.items():
        if tensors[k].shape != shape:
            raise CheckpointError(
                f"{path / WEIGHTS}: tensor {k} has shape {tuple(tensors[k].shape)}, config.json implies {tuple(shape)}"
            )
    model = build_model(cfg, init=False)  # every weight comes from the file: no random init to redo
    model.load_state_dict(tensors, strict=False)  # tied aliases are filled through their shared parameter
    model.to(device=device, dtype=dtype or torch.float32).eval()
    if isinstance(model, SentimentClassifier) and model.ngram is not None:
        model.ngram.float()  # fp32 whatever the dtype: a long review sums thousands of table rows
    if quantize is not None:
        quantize_linears(model, quantize)
    return LoadedModel(path.name, path, cfg, model, tokenizer, meta, digest)

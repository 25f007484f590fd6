"""Checkpoint directory format: config.json + model.safetensors + sentencepiece model + README.md + metrics.json.

An imported Marian model (training/import_marian.py) adds a target sentencepiece model and vocab.json
(config.json "target_tokenizer", "vocab": model.tokenizer.PairTokenizer) and names its "origin"; an
imported XLM-R classifier (training/import_xlmr.py) has "tokenizer_ids": "fairseq" (FairseqTokenizer).

Loading reads only JSON, safetensors and the sentencepiece protobuf: nothing is ever unpickled. Every file's
size and sha256 are recorded in config.json, so a truncated or swapped file is named precisely at load.
"""

from __future__ import annotations

import hashlib
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
from model.quantize import quantize as quantize_linears
from model.tokenizer import FairseqTokenizer, PairTokenizer, Tokenizer
from model.translator import Translator
from model.xlmr import XLMRClassifier

FORMAT = "transformer-serving/1"
CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.model"
TARGET_TOKENIZER, VOCAB = "target.model", "vocab.json"  # a PairTokenizer's other two files


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted or inconsistent; the message names the file."""


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


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def _read(path: Path, name: str, files: dict[str, Any]) -> tuple[bytes, str]:
    """Read a listed file and check its recorded size and sha256 -> (bytes, sha256)."""
    f = path / name
    if not f.is_file():
        raise CheckpointError(f"{f}: file is missing from the checkpoint")
    data = f.read_bytes()
    want = files.get(name)
    if want and len(data) != want["bytes"]:
        raise CheckpointError(
            f"{f}: {len(data)} bytes, config.json records {want['bytes']} (truncated or replaced?)"
        )
    digest = _sha256(data)
    if want and digest != want["sha256"]:
        raise CheckpointError(
            f"{f}: sha256 differs from the one recorded in config.json (corrupted or replaced)"
        )
    return data, digest


def read_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory does not exist")
    f = path / CONFIG
    if not f.is_file():
        raise CheckpointError(f"{f}: file is missing from the checkpoint")
    try:
        meta = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{f}: not valid JSON ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or "model" not in meta:
        raise CheckpointError(f"{f}: not a {FORMAT} config (needs 'format': {FORMAT!r} and 'model')")
    return meta


def load_tokenizer(path: str | Path, meta: dict[str, Any], cfg: ModelConfig) -> Tokenizer | PairTokenizer:
    """The tokenizer of the checkpoint at `path` (config.json's `meta`, model section `cfg`), its files and
    special ids checked: what a process that runs no model but tokenizes for one loads."""
    path = Path(path)
    files = meta.get("files", {})
    tok_name = meta.get("tokenizer", TOKENIZER)
    _read(path, tok_name, files)
    tokenizer: Tokenizer | PairTokenizer
    try:
        if "vocab" in meta:  # separate source/target sentencepiece models over vocab.json's ids
            target, vocab = meta.get("target_tokenizer", TARGET_TOKENIZER), meta["vocab"]
            _read(path, target, files)
            try:
                pieces = json.loads(_read(path, vocab, files)[0])
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise CheckpointError(f"{path / vocab}: not valid JSON ({e})") from e
            tokenizer = PairTokenizer(path / tok_name, path / target, pieces)
        elif meta.get("tokenizer_ids") == "fairseq":  # an imported XLM-R classifier
            tokenizer = FairseqTokenizer(path / tok_name)
        else:
            tokenizer = Tokenizer(path / tok_name)
    except ValueError as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path / tok_name}: {e}") from e
    if tokenizer.vocab_size != cfg.vocab_size:
        raise CheckpointError(
            f"{path / tok_name}: vocabulary of {tokenizer.vocab_size} pieces, config.json says vocab_size={cfg.vocab_size}"
        )
    special = {
        "pad_id": tokenizer.pad_id,
        "unk_id": tokenizer.unk_id,
        "bos_id": tokenizer.bos_id,
        "eos_id": tokenizer.eos_id,
    }
    wrong = {k: (v, getattr(cfg, k)) for k, v in special.items() if v != getattr(cfg, k)}
    if wrong:
        raise CheckpointError(f"{path / tok_name}: special ids (tokenizer, config.json) differ: {wrong}")
    return tokenizer


def load_checkpoint(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> LoadedModel:
    """Load a checkpoint directory into an eval-mode model on `device` (dtype default: float32);
    quantize="int8": dynamic int8 Linear layers (model.quantize; float32 on CPU only)."""
    path = Path(path)
    meta = read_config(path)
    try:
        cfg = ModelConfig.from_dict(meta["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path / CONFIG}: invalid 'model' section ({e})") from e
    files = meta.get("files", {})
    tokenizer = load_tokenizer(path, meta, cfg)
    data, digest = _read(path, WEIGHTS, files)  # digest: hashed once, checked and reported
    try:
        tensors = safetensors.torch.load(data)
    except Exception as e:  # safetensors raises its own SafetensorError on a bad header or short body
        raise CheckpointError(f"{path / WEIGHTS}: not a valid safetensors file ({e})") from e
    model = build_model(cfg, init=False)  # every weight comes from the file: no random init to redo
    expected = {k: v.shape for k, v in unique_state(model).items()}
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
    model.load_state_dict(tensors, strict=False)  # tied aliases are filled through their shared parameter
    model.to(device=device, dtype=dtype or torch.float32).eval()
    if isinstance(model, SentimentClassifier) and model.ngram is not None:
        model.ngram.float()  # fp32 whatever the dtype: a long review sums thousands of table rows
    if quantize is not None:
        quantize_linears(model, quantize)
    return LoadedModel(path.name, path, cfg, model, tokenizer, meta, digest)

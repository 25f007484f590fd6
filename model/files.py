"""The files of a checkpoint directory that need no torch: config.json (`read_config`) and the tokenizers
(`load_tokenizer`), each checked against the size and sha256 recorded in config.json (model.checkpoint holds
the weights' half; an HTTP process of the server reads these alone, app/parallel/remote.py)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from model.config import ModelConfig
from model.tokenizer import FairseqTokenizer, PairTokenizer, Tokenizer

FORMAT = "transformer-serving/1"
CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.model"
# a checkpoint's name: one path component of the checkpoint directory, and what requests call the model: no
# separators, no "." or "..", no leading dot (staging folders are hidden), printable ASCII a URL can carry (the
# importers and pulls write only such names, the server's admin API takes only such names)
CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
TARGET_TOKENIZER, VOCAB = "target.model", "vocab.json"  # a PairTokenizer's other two files


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted or inconsistent; the message names the file."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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

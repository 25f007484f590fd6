"""The import's check: the checkpoint is loaded back with the server's own loader and run once before it
is moved into place, so nothing the server would refuse is ever written (training.imports)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from model.checkpoint import load_checkpoint
from model.classifier import SentimentClassifier
from model.inference import classify_ids
from model.preprocess import classifier_ids, source_ids
from model.translator import Translator

PROBE = "Hello, world."  # the check's forward pass: any text the tokenizer can cut


class ImportFailed(ValueError):
    """The import cannot produce a checkpoint the server would load; the message is one line."""


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def check_loadable(path: Path) -> None:
    """Load `path` as the server does and run one forward pass; ImportFailed with the loader's reason."""
    try:
        loaded = load_checkpoint(path)
    except ValueError as e:  # CheckpointError, and a ModelConfig the loader refuses
        raise ImportFailed(f"the server's loader refuses the result: {one_line(e)}") from e
    model, tok, cfg = loaded.model, loaded.tokenizer, loaded.config
    with torch.inference_mode():
        if isinstance(model, SentimentClassifier):
            out = classify_ids(model, [classifier_ids(tok, PROBE, cfg)])  # type: ignore[arg-type]
        else:
            assert isinstance(model, Translator)
            lang = cfg.target_langs[0]
            src = torch.tensor([cfg.source_prefix(lang) + source_ids(tok, PROBE, cfg)])  # type: ignore[arg-type]
            out = model(src, torch.tensor([[cfg.start_id(lang)]]))
    if not torch.isfinite(out).all():
        raise ImportFailed("a forward pass of the result gives NaN or inf (corrupted weights?)")


def write_checked(out: Path, write: Callable[[Path], Path], force: bool) -> Path:
    """write(stage) into a staging folder next to `out`, check_loadable, then move it to `out` (replacing
    an existing one only with force). On any failure the staging folder is removed: nothing half-written."""
    if out.exists() and not force:
        raise ImportFailed(f"{out} already exists (--force replaces it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.importing"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        write(stage)
        check_loadable(stage)
    except BaseException as e:
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(e, ImportFailed | ValueError | OSError) and str(stage) in str(e):
            raise type(e)(str(e).replace(str(stage), str(out))) from e
        raise
    if out.exists():
        shutil.rmtree(out)
    stage.rename(out)
    return out

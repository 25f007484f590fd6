"""The import's check: the checkpoint is loaded back with the server's own loader and run once before it
is moved into place, so nothing the server would refuse is ever written (training.imports)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from engines.argos import is_argos_package
from model.checkpoint import load_checkpoint
from model.classifier import SentimentClassifier
from model.files import CHECKPOINT_NAME
from model.inference import classify_ids
from model.preprocess import classifier_ids, source_ids
from model.translator import Translator

PROBE = "Hello, world."  # the check's forward pass: any text the tokenizer can cut


class ImportFailed(ValueError):
    """The import cannot produce a checkpoint the server would load; the message is one line."""


def one_line(e: BaseException) -> str:
    """The exception's reason on one line: a KeyError's key is named as missing, an exception without a
    message is named by its type."""
    if isinstance(e, KeyError) and len(e.args) == 1:
        return f"missing key {e.args[0]!r}"
    text = " ".join(str(e).split())
    return text if text else type(e).__name__


def checkpoint_path(out_dir: Path, name: str) -> Path:
    """out_dir / name, where `name` must be one plain path component (CHECKPOINT_NAME): ImportFailed otherwise."""
    if not CHECKPOINT_NAME.fullmatch(name):
        raise ImportFailed(
            f"--name {name!r}: a checkpoint name is 1 to 100 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit (one folder inside --out-dir)"
        )
    return out_dir / name


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


def check_replaceable(out: Path, force: bool) -> None:
    """An existing `out` is replaced only with force, and only when it is a folder the server serves (a
    real folder holding config.json, or an Argos package): --force never deletes anything else."""
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise ImportFailed(f"{out} already exists (--force replaces it)")
    if out.is_symlink() or not ((out / "config.json").is_file() or is_argos_package(out)):
        raise ImportFailed(f"{out} exists and is not a checkpoint folder (no config.json): not replaced")


def write_checked(
    out: Path, write: Callable[[Path], Path], force: bool, check: Callable[[Path], object] = check_loadable
) -> Path:
    """write(stage) into a staging folder next to `out`, check(stage) (by default check_loadable), then
    move it to `out` (replacing an existing checkpoint only with force). On any failure the staging folder
    is removed: nothing half-written. The old checkpoint is moved aside before the new one takes its name,
    then removed."""
    check_replaceable(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.importing"
    stage = staging / out.name  # the checkpoint's own name: what the importers write into its card
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        write(stage)
        check(stage)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, ImportFailed | ValueError | OSError) and str(stage) in str(e):
            raise type(e)(str(e).replace(str(stage), str(out))) from e
        raise
    if out.exists():
        old = out.parent / f".{out.name}.replaced"
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        stage.rename(out)
        shutil.rmtree(old)
    else:
        stage.rename(out)
    staging.rmdir()
    return out

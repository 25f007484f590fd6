"""The checkpoint directory as the admin API sees it: a model's folder by name (never outside the directory),
and every folder that holds a model, served or not."""

from __future__ import annotations

from pathlib import Path

from app.core.errors import NotFound, invalid
from app.registry import Registry, holds_model, public_reason, read_entry, shown
from app.schemas import StoredModel
from model.files import CHECKPOINT_NAME


def folder(root: Path, name: str) -> Path:
    """The folder of model `name` in the checkpoint directory: 422 for a name that could leave it, 404 when
    it holds no model."""
    if not CHECKPOINT_NAME.fullmatch(name) or ".." in name:
        raise invalid(
            ("path", "name"),
            f"{shown(name)} is not a model's name: letters, digits, '.', '_' and '-', at most 100, "
            "starting with a letter or a digit",
        )
    path = root / name
    if path.parent != root or not holds_model(path):
        raise NotFound(f"name: no model folder {shown(name)} in the checkpoint directory")
    return path


def listing(root: Path, registry: Registry, status: dict[str, str]) -> list[StoredModel]:
    """Every model folder of `root`, and every model served (a folder may have gone since), by name
    (blocking: reads each config)."""
    names = {p.name for p in root.iterdir() if CHECKPOINT_NAME.fullmatch(p.name) and holds_model(p)} | set(
        registry.entries
    )
    out = []
    for name in sorted(names):
        served = registry.entries.get(name)
        row = StoredModel(
            name=name,
            status=status.get(name, "not_loaded"),
            served_version=served.version if served is not None else None,
            reason=registry.failed.get(name),
        )
        path = root / name
        if holds_model(path):
            try:
                entry = read_entry(path)
            except ValueError as e:  # CheckpointError, ArgosPackageError
                row.reason = row.reason or public_reason(root, e)
            else:
                if entry is not None:
                    row.task, row.origin, row.version = entry.task, entry.origin, entry.version
        out.append(row)
    return out

"""The served checkpoints: what the checkpoint directory holds (discovery), their weights (loading) and what
became of each (failures). Choosing a model for a request is the tasks' (app/tasks/routing.py): they read
the entries through `view`, rebuilt whenever a model comes, goes or fails.

A model directory is one of ours (config.json: trained here, or imported by `python -m training import` or
`pull`) or an unpacked Argos Translate package (metadata.json + model/: engines/argos.py).

A model that fails (an unreadable config.json at discovery, or any error while loading) is recorded with its
reason (`fail`), the checkpoint's path taken out (it stays in the log). With APP_STRICT_READINESS (default)
the tasks keep routing to it, and its requests answer 503 naming it and its reason; without, the tasks route
around it (`routable`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from app.core.errors import NotFound, Unavailable
from app.core.settings import ENV_PREFIX, SettingsError
from app.schemas import MAX_MODEL_NAME
from engines.argos import (
    ArgosPackage,
    ArgosPackageError,
    NotTranslation,
    is_argos_package,
    read_argos_package,
)
from model.config import ModelConfig
from model.files import CONFIG, CheckpointError, read_config

if TYPE_CHECKING:  # torch: where weights load (the model process); routing (an HTTP process) needs none
    import torch

    from model import LoadedModel

log = logging.getLogger(__name__)
V = TypeVar("V")
VERSION_SEP = "@"  # model@version: a version's key (a model's name has none: training/import_check.py)
DATASET_LANGS = {"nsmc": "ko", "imdb": "en"}  # training sets -> the language a model reads, when unnamed


def shown(name: str, limit: int = 40) -> str:
    """A requested name as a 404 echoes it: repr, cut to `limit` characters."""
    return repr(name if len(name) <= limit else name[:limit] + "…")


@dataclass
class ModelEntry:
    """A discovered checkpoint; `loaded` is filled by the background loader."""

    name: str
    path: Path
    config: ModelConfig
    meta: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    has_card: bool = False
    loaded: LoadedModel | None = None
    package: ArgosPackage | None = None  # an Argos Translate package (no torch model: CTranslate2 only)
    version: str = "0"  # its files' fingerprint (`fingerprint`): every process names the same files alike

    @property
    def key(self) -> str:
        """This version's key: what its items are batched and sent between processes under."""
        return f"{self.name}{VERSION_SEP}{self.version}"

    @property
    def revision(self) -> str | None:
        """The commit it was pulled at (`python -m training pull`), when it was."""
        hub = self.meta.get("training", {}).get("imported", {}).get("hub", {})
        return str(hub["revision"]) if isinstance(hub, dict) and hub.get("revision") else None

    @property
    def origin(self) -> str:
        """Where the weights come from: "trained" (here), "opus-mt" (imported) or "argos"."""
        return "argos" if self.package is not None else str(self.meta.get("origin", "trained"))

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def languages(self) -> list[str]:
        """The languages it reads: its config's, else the name's suffix (a name ending -ko) or its training set's."""
        if self.config.source_langs:
            return list(self.config.source_langs)
        suffix = self.name.rsplit("-", 1)[-1]
        if len(suffix) == 2 and suffix.isalpha():
            return [suffix.lower()]
        dataset = str(self.meta.get("training", {}).get("config", {}).get("dataset", ""))
        return [DATASET_LANGS[dataset]] if dataset in DATASET_LANGS else []

    def require_loaded(self) -> LoadedModel:
        if self.loaded is None:
            raise Unavailable(f"model {self.name} is still loading")
        return self.loaded


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def public_reason(root: Path, error: BaseException) -> str:
    """An error's message as clients may read it: one line, paths under the checkpoint dir made relative
    (MODEL/tokenizer.model), so no filesystem path leaves the server."""
    text = " ".join(str(error).split()) or type(error).__name__
    for base in {str(root.resolve()), str(root)}:
        text = text.replace(base.rstrip("/") + "/", "")
    return text


def fingerprint(path: Path) -> str:
    """12 hex digits of a model folder's files (relative path, size, modification time): cheap (no file is
    read), and new when any file is replaced, as a pull or an import does."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


def split_key(key: str) -> tuple[str, str]:
    """A version's key -> (model name, version)."""
    name, _, version = key.rpartition(VERSION_SEP)
    return name, version


def read_entry(path: Path) -> ModelEntry | None:
    """The checkpoint at `path` (cheap: its config, no weights); None for an Argos package that translates
    nothing (argospm's folder also holds e.g. sentence splitters). CheckpointError or ArgosPackageError when it
    cannot be served."""
    if not (path / CONFIG).is_file():
        try:
            package = read_argos_package(path)
        except NotTranslation as e:
            log.warning("skipped %s", e)
            return None
        meta = {"origin": "argos", "argos": package.metadata}
        return ModelEntry(
            path.name, path, package.config, meta, {}, (path / "README.md").is_file(), package=package
        )
    meta = read_config(path)
    try:
        cfg = ModelConfig.from_dict(meta["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path / CONFIG}: invalid 'model' section ({e})") from e
    metrics = _read_json(path / "metrics.json")
    card = (path / "README.md").is_file()
    return ModelEntry(path.name, path, cfg, meta, metrics, card, version=fingerprint(path))


def holds_model(path: Path) -> bool:
    """Whether a folder of the checkpoint directory is a model's (ours, or an Argos package)."""
    return (path / CONFIG).is_file() or is_argos_package(path)


class Registry:
    def __init__(
        self,
        entries: list[ModelEntry],
        device: torch.device | None,
        dtype: torch.dtype | None,
        quantize: str | None = None,
        failed: dict[str, str] | None = None,
        max_model_bytes: int | None = None,
    ) -> None:
        """failed: model -> reason, the models whose config.json could not be read; device and dtype None: a
        routing registry, which loads no weights (an HTTP process: app/parallel/remote.py);
        max_model_bytes: the memory one model may take (APP_MAX_MODEL_BYTES), None: no bound."""
        self.entries = {e.name: e for e in entries}
        self.device, self.dtype, self.quantize = device, dtype, quantize
        self.max_model_bytes = max_model_bytes
        self.failed: dict[str, str] = dict(failed or {})
        self.rerouted: set[str] = set()  # failed models the tasks route around (not APP_STRICT_READINESS)
        self.generation = 0  # bumped by every change: the views are rebuilt on the next read
        self.views: dict[Hashable, tuple[int, Any]] = {}  # see `view`

    def view(self, key: Hashable, build: Callable[[], V]) -> V:
        """build(), once per generation of the registry: what the tasks derive from the entries (their
        routing tables), rebuilt when a model comes, goes or fails. key: the view's, with what it depends on
        besides the entries (e.g. its settings)."""
        got = self.views.get(key)
        if got is None or got[0] != self.generation:
            got = self.views[key] = (self.generation, build())
        return got[1]  # type: ignore[no-any-return]

    def routable(self) -> list[ModelEntry]:
        """The entries the tasks route to, in name order: all but the failed ones routed around."""
        return sorted((e for e in self.entries.values() if e.name not in self.rerouted), key=lambda e: e.name)

    def fail(self, name: str, reason: str, reroute: bool) -> None:
        """Record that `name` failed to load. reroute: the tasks route around it (app/tasks/routing.py logs
        where its requests now go); else they still route to it and its requests answer 503 (`check_loaded`)."""
        self.failed[name] = reason
        if reroute:
            self.rerouted.add(name)
        self.generation += 1

    def install(self, entry: ModelEntry) -> None:
        """A model loaded while serving, or a new version of one: the tasks route to it from now on."""
        self.entries[entry.name] = entry
        self.failed.pop(entry.name, None)
        self.rerouted.discard(entry.name)
        self.generation += 1

    def remove(self, name: str) -> ModelEntry | None:
        """An unloaded model: the tasks route to it no more."""
        self.failed.pop(name, None)
        self.rerouted.discard(name)
        self.generation += 1
        return self.entries.pop(name, None)

    def check_loaded(self, name: str) -> str:
        """`name`, or 503 naming it and why it failed to load."""
        if name in self.failed:
            raise Unavailable(f"model {name} failed to load: {self.failed[name]}", retry_after=None)
        return name

    @classmethod
    def discover(
        cls,
        root: Path,
        device: torch.device | None,
        dtype: torch.dtype | None,
        quantize: str | None = None,
        max_model_bytes: int | None = None,
        allow_empty: bool = False,
    ) -> Registry:
        """Read every `root/*/config.json` and Argos `root/*/metadata.json` (cheap: no weights); a checkpoint
        that cannot be read fails alone, a directory with nothing to serve fails start-up (allow_empty: not
        when APP_MODELS are to be pulled into it)."""
        if not root.is_dir():
            raise SettingsError(f"{ENV_PREFIX}CHECKPOINT_DIR={root}: directory does not exist")
        entries, failed = [], {}
        for path in sorted(p for p in root.iterdir() if holds_model(p)):
            if len(path.name) > MAX_MODEL_NAME:  # a request could not name it
                raise CheckpointError(
                    f"{path}: a model's name is its directory's, at most {MAX_MODEL_NAME} characters"
                )
            try:
                entry = read_entry(path)
            except (CheckpointError, ArgosPackageError) as e:  # any checkpoint's error: the model fails
                log.error("model %s failed: %s", path.name, e)
                failed[path.name] = public_reason(root, e)
                continue
            if entry is not None:
                entries.append(entry)
        if not entries and failed and not allow_empty:  # nothing could ever serve: fail start-up, naming each
            reasons = "; ".join(f"{n}: {r}" for n, r in failed.items())
            raise SettingsError(f"{ENV_PREFIX}CHECKPOINT_DIR={root}: no model can be served ({reasons})")
        if not entries and not allow_empty:
            raise SettingsError(
                f"{ENV_PREFIX}CHECKPOINT_DIR={root}: no checkpoints (subdirectories holding a {CONFIG} "
                "or an Argos Translate package)"
            )
        return cls(entries, device, dtype, quantize, failed, max_model_bytes)

    def load(self, entry: ModelEntry) -> LoadedModel:
        """Load a checkpoint's weights into `entry.loaded` (blocking: off the event loop); not for an Argos
        package (its handler opens it in CTranslate2)."""
        from model.checkpoint import OverBudget, load_checkpoint

        name = entry.name
        assert entry.package is None, f"{name} is an Argos package"
        assert self.device is not None, "a routing registry loads no weights"
        assert self.dtype is not None
        start = time.perf_counter()
        try:
            entry.loaded = load_checkpoint(
                entry.path, self.device, self.dtype, self.quantize, self.max_model_bytes
            )
        except OverBudget as e:
            raise OverBudget(f"{e} ({ENV_PREFIX}MAX_MODEL_BYTES)") from None
        log.info(
            "loaded %s (%s, %s parameters, %s on %s) in %.2fs",
            name,
            entry.task,
            f"{entry.loaded.num_parameters:,}",
            self.quantize or str(self.dtype).removeprefix("torch."),
            self.device,
            time.perf_counter() - start,
        )
        return entry.loaded

    def names(self, task: str) -> list[str]:
        return [n for n, e in self.entries.items() if e.task == task]

    def get(self, name: str, task: str) -> ModelEntry:
        """The model named in a request for `task`: 404 naming the others, 503 when it failed."""
        entry = self.entries.get(name)
        if entry is None or entry.task != task:
            loaded = ", ".join(self.names(task)) or "none"
            raise NotFound(f"model: no {task} model named {shown(name)} (loaded {task} models: {loaded})")
        self.check_loaded(name)
        return entry

    def get_any(self, name: str) -> ModelEntry:
        entry = self.entries.get(name)
        if entry is None:
            raise NotFound(f"model: no model named {shown(name)} (loaded models: {', '.join(self.entries)})")
        self.check_loaded(name)
        return entry

"""A model process's side of managing models while serving: a version staged (loaded and warmed up beside
the one served, addressable by its items but routed to by no request), committed (the tasks route to it from
then on), retired (its batchers drained, its handlers dropped), aborted, or a model unloaded.

A version is its model@fingerprint key (app/registry.py): an HTTP process tokenizes with one version's text
half and its items are batched on that version's handlers, so a reload swaps atomically: what was queued
finishes on the old weights, what comes after the swap runs on the new ones. The caller orders the steps
(app.serving.service.Service.manage in one process; app.parallel.remote.RemoteService.manage across processes: every
model process stages before any commits, and every HTTP process has switched before an old version is
retired).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from app.core.errors import Conflict, NotFound, Unservable
from app.management.catalog import folder, listing
from app.registry import ModelEntry, public_reason, read_entry, shown, split_key
from app.schemas import ManagedModel, StoredModel
from app.tasks.task import Task

if TYPE_CHECKING:
    from app.runtime.lifecycle import Lifecycle

log = logging.getLogger(__name__)
Action = Literal["load", "reload", "unload"]


class Staged(NamedTuple):
    """A stage's outcome: the version's key, and whether it is the one already served (nothing to do)."""

    key: str
    unchanged: bool


class ModelControl:
    """Changes one model at a time each (409 for a second one under way)."""

    def __init__(self, life: Lifecycle) -> None:
        self.life = life
        self._staged: dict[str, tuple[ModelEntry, dict[Task, Any]]] = {}  # key -> the version, loaded
        self._busy: set[str] = set()  # models with a change under way: one at a time each

    async def catalog(self) -> list[StoredModel]:
        registry = self.life.ready_registry()
        return await asyncio.to_thread(
            listing, self.life.settings.checkpoint_dir, registry, dict(self.life.model_status)
        )

    def _claim(self, name: str) -> None:
        if name in self._busy:
            raise Conflict(f"model {name} is being loaded, reloaded or unloaded already: try again after")
        self._busy.add(name)

    async def stage(self, action: Action, name: str) -> Staged:
        """Load `name`'s folder as it is now beside what is served: 404 no such folder, 409 a load of a
        model served (or a reload of one that is not), 422 when it cannot be loaded (why, and the version
        served before goes on)."""
        registry = self.life.ready_registry()
        path = folder(self.life.settings.checkpoint_dir, name)
        served = registry.entries.get(name)
        if action == "load" and served is not None and name not in registry.failed:
            raise Conflict(f"model {name} is served already (version {served.version}): reload it")
        if action == "reload" and served is None:
            raise NotFound(f"name: model {shown(name)} is not served: load it")
        self._claim(name)
        try:
            try:
                entry = await asyncio.to_thread(read_entry, path)
            except ValueError as e:  # CheckpointError, ArgosPackageError
                raise Unservable(f"model {name} cannot be served: {public_reason(path.parent, e)}") from None
            if entry is None:
                raise Unservable(f"model {name}: its Argos Translate package translates nothing")
            if served is not None and served.version == entry.version and name not in registry.failed:
                self._busy.discard(name)
                return Staged(served.key, unchanged=True)
            try:
                handlers = await self.life.load_version(entry)
            except Exception as e:  # noqa: BLE001 (any error of the load: said, and the old version serves)
                log.error("model %s: version %s failed to load: %s", name, entry.version, e)
                raise Unservable(
                    f"model {name} could not be loaded: {public_reason(path.parent, e)}"
                    + ("; the version served before goes on" if served is not None else "")
                ) from None
        except BaseException:
            self._busy.discard(name)
            if self.life.model_status.get(name) == "warming_up" and name not in registry.entries:
                del self.life.model_status[name]
            raise
        for task, handler in handlers.items():  # its items can be batched from now on (another process's)
            task.versions[entry.key] = handler
        self._staged[entry.key] = (entry, handlers)
        log.info("model %s: version %s staged", name, entry.version)
        return Staged(entry.key, unchanged=False)

    def commit(self, key: str) -> str | None:
        """The staged version served from now on -> the key of the one it replaces (to retire), if any."""
        entry, handlers = self._take(key)
        old = self.life.registry.entries.get(entry.name) if self.life.registry else None
        self.life.install(entry, handlers)
        log.info("model %s: serving version %s%s", entry.name, entry.version,
                 f" (was {old.version})" if old is not None else "")  # fmt: skip
        return old.key if old is not None and old.key != key else None

    def abort(self, key: str) -> None:
        """A staged version dropped (another process could not stage it)."""
        if key in self._staged:
            entry, handlers = self._take(key)
            for task in handlers:
                task.uninstall(key)
            if entry.name not in (self.life.registry.entries if self.life.registry else {}):
                self.life.model_status.pop(entry.name, None)

    def _take(self, key: str) -> tuple[ModelEntry, dict[Task, Any]]:
        staged = self._staged.pop(key, None)
        if staged is None:
            raise NotFound(f"no staged version {key}")
        self._busy.discard(staged[0].name)
        return staged

    def unload(self, name: str) -> str | None:
        """`name` served no more (its requests 404 from now on) -> its version's key, to retire (None: it had
        only failed, e.g. its config or its pull: the failure is cleared)."""
        registry = self.life.ready_registry()
        if name not in registry.entries and name in registry.failed:
            registry.remove(name)
            self.life.model_status.pop(name, None)
            self.life.metrics.forget_model(name)
            return None
        if name not in registry.entries:
            raise NotFound(f"name: model {shown(name)} is not served")
        self._claim(name)
        try:
            entry = registry.remove(name)
            assert entry is not None
            for task in self.life.tasks:
                task.handlers.pop(name, None)
            if self.life.model_status.pop(name, None) == "ready":
                self.life.metrics.models_loaded.dec()
            self.life.graphs.pop(name, None)
            self.life.metrics.forget_model(name)
        finally:
            self._busy.discard(name)
        log.info("model %s: unloaded (version %s)", name, entry.version)
        return entry.key

    async def changed(self) -> None:
        """After a commit or an unload: readiness and the language detector for the models served now."""
        self.life.settle()
        await self.life.relanguage()

    async def retire(self, key: str | None) -> None:
        """A version no longer routed to: its handlers dropped (an item of it arriving from now on gets 503),
        then what its batchers hold is computed (they keep the handler's `run` until they close)."""
        if key is None:
            return
        name, _ = split_key(key)
        for task in self.life.tasks:
            if task.versions.get(key) is not None and task.handlers.get(name) is task.versions[key]:
                continue  # still the current one (a reload back to it): kept
            task.uninstall(key)
        batchers = self.life.queues.pool.release(key)
        await asyncio.gather(*(b.close() for b in batchers))
        del batchers
        gc.unfreeze()  # what loading froze (Lifecycle._load_all) is collected again, the old model with it
        gc.collect()
        gc.freeze()


async def manage_here(control: ModelControl, action: Action, name: str) -> ManagedModel:
    """A load, reload or unload in one process: stage, commit, retire (app.serving.service.Service.manage)."""
    start = time.perf_counter()
    registry = control.life.ready_registry()
    before = registry.entries.get(name)
    previous = before.version if before is not None else None
    if action == "unload":
        await control.retire(control.unload(name))
        await control.changed()
        return ManagedModel(name=name, action=action, changed=True, previous_version=previous,
                            seconds=time.perf_counter() - start)  # fmt: skip
    staged = await control.stage(action, name)
    if not staged.unchanged:
        old = control.commit(staged.key)
        await control.changed()
        if old is not None:
            await control.retire(old)
    _, version = split_key(staged.key)
    return ManagedModel(
        name=name, action=action, changed=not staged.unchanged, version=version,
        previous_version=previous, seconds=time.perf_counter() - start,
    )  # fmt: skip

"""The service's batchers: one per task, model and batch key (created on first use; those of dynamic keys,
the decoding options, are retired when idle, at most APP_MAX_DECODE_QUEUES live); every batcher of a model is
admitted against the model's one ModelQueue (app/batching/batcher.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from app.batching.batcher import Batcher, BatchSettings, InferenceWorkers, ModelQueue, OnIdle
from app.core.errors import QueueFull, Unavailable
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.registry import split_key
from app.tasks.task import Task

IDLE_BATCHER_S = 300.0  # a decoding-option queue unused this long is retired


class BatcherPool:
    """Batchers by key (task, model, batch key), created on first use; dynamic keys (decoding options)
    retire when idle."""

    def __init__(self) -> None:
        self._batchers: dict[Hashable, Batcher[Any, Any]] = {}
        self._dynamic: dict[Hashable, None] = {}  # an ordered set: the oldest retires first

    def get(self, key: Hashable) -> Batcher[Any, Any] | None:
        return self._batchers.get(key)

    def add(
        self, key: Hashable, create: Callable[[OnIdle], Batcher[Any, Any]], dynamic: bool = False
    ) -> Batcher[Any, Any]:
        """`create(on_idle)`'s batcher for `key` (on_idle retires it from the pool)."""
        batcher = self._batchers[key] = create(lambda b: self._retire(key, b))
        if dynamic:
            self._dynamic[key] = None
        return batcher

    def _retire(self, key: Hashable, batcher: Batcher[Any, Any]) -> None:
        if self._batchers.get(key) is batcher:
            del self._batchers[key]
            self._dynamic.pop(key, None)

    def count(self, task: str) -> int:
        """Live batchers of `task` (by its name)."""
        return sum(isinstance(k, tuple) and k[0] == task for k in self._batchers)

    @property
    def dynamic(self) -> int:
        """Live batchers of dynamic keys."""
        return len(self._dynamic)

    def retire_idle(self) -> bool:
        """Retire one idle batcher of a dynamic key (nothing queued or running) now; False when all are busy."""
        for key in self._dynamic:
            batcher = self._batchers[key]
            if batcher.idle:
                del self._batchers[key]
                self._dynamic.pop(key, None)
                batcher.stop_soon()  # its loop ends at once: nothing to drain
                return True
        return False

    def release(self, version: str) -> list[Batcher[Any, Any]]:
        """Take a model version's batchers out of the pool (to drain and close them): new items of that
        model go to its current version's."""
        keys = [k for k in self._batchers if isinstance(k, tuple) and k[1] == version]
        for k in keys:
            self._dynamic.pop(k, None)
        return [self._batchers.pop(k) for k in keys]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._batchers

    def __len__(self) -> int:
        return len(self._batchers)

    def items(self) -> list[tuple[Hashable, Batcher[Any, Any]]]:
        return list(self._batchers.items())

    async def close(self) -> None:
        """Drain and stop every batcher (their queued items are still computed)."""
        batchers, self._batchers, self._dynamic = list(self._batchers.values()), {}, {}
        await asyncio.gather(*(b.close() for b in batchers))


class Queues:
    """The batchers of every model, made with the settings' limits, on `workers` (set once they exist)."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.workers: InferenceWorkers | None = None
        self.pool = BatcherPool()
        self.models: dict[str, ModelQueue] = {}  # per model: the admission limits all its batchers share

    def depth(self, model: str) -> int:
        """Items waiting for `model`: in any of its queues, or in a batch waiting for a worker."""
        return self.model(model).waiting()[0]

    def model(self, name: str) -> ModelQueue:
        queue = self.models.get(name)
        if queue is None:
            s = self.settings
            queue = self.models[name] = ModelQueue(name, s.max_queue, s.max_queue_work)
        return queue

    def batcher(self, task: Task, version: str, key: Hashable) -> Batcher[Any, Any]:
        """The batcher of `task`'s items for a model's version (model@version) under batch key `key`
        (task.batching says how it batches); 503 when that version is no longer served (reloaded or
        unloaded since the items were made). Dynamic keys (chosen by requests: decoding options) are at
        most APP_MAX_DECODE_QUEUES live at once: a new one retires an idle one, or gets 429."""
        pool_key = (task.name, version, key)
        batcher = self.pool.get(pool_key)
        if batcher is not None:
            return batcher
        model, _ = split_key(version)
        handler = task.versions.get(version)
        if handler is None:
            raise Unavailable(
                f"model {model} changed while the request was made (reloaded or unloaded): retry"
            )
        spec = task.batching(model, key)
        limit = self.settings.max_decode_queues
        if spec.dynamic and self.pool.dynamic >= limit and not self.pool.retire_idle():
            raise QueueFull(
                f"{limit} distinct decoding queues (model, target_lang, beam_size) are in use, the limit "
                "(APP_MAX_DECODE_QUEUES); retry later or use one of theirs",
                1,
            )
        run = handler.run if key is None else partial(handler.run, key=key)
        policy = self._policy(
            expensive=spec.expensive, stoppable=spec.stoppable, max_batch_size=spec.max_batch_size,
            idle_timeout_s=IDLE_BATCHER_S if spec.dynamic else None,
        )  # fmt: skip
        return self.pool.add(
            pool_key,
            lambda on_idle: self._new(
                spec.name,
                run,
                model,
                policy,
                label=spec.label,
                on_idle=on_idle if spec.dynamic else None,
            ),
            dynamic=spec.dynamic,
        )

    def _policy(
        self,
        *,
        expensive: bool = False,
        stoppable: bool = False,
        max_batch_size: int | None = None,
        idle_timeout_s: float | None = None,
    ) -> BatchSettings:
        """Batches from the settings' limits; expensive ones (decoding, attention maps) run in the workers'
        expensive lane, in batches of at most APP_MAX_BATCH_WORK work units; stoppable: run takes
        should_stop= (decoding stops between steps once every request of the batch has left)."""
        s = self.settings
        items, work = s.batch_limits(expensive)  # on CUDA by default: every batch bounded by work units
        return BatchSettings(
            max_batch_size=max_batch_size or items,
            max_delay_s=0.0 if max_batch_size == 1 else s.max_batch_delay_ms / 1000,
            max_batch_work=work,
            expensive=expensive,
            stoppable=stoppable,
            idle_timeout_s=idle_timeout_s,
        )

    def _new(
        self,
        name: str,
        run: Callable[..., list[Any]],
        model: str,
        policy: BatchSettings,
        *,
        label: str | None = None,
        on_idle: OnIdle | None = None,
    ) -> Batcher[Any, Any]:
        """A batcher of `model`, admitted against the model's queue limits."""
        assert self.workers is not None
        queue = self.model(model)
        return Batcher(
            name, run, self.workers, queue, policy, metrics=self.metrics, label=label, on_idle=on_idle
        )  # fmt: skip

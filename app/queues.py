"""The service's batchers: one per model and kind, and for translators per decoding mode (created on first
use, retired when idle, at most APP_MAX_DECODE_QUEUES live); every batcher of a model is admitted against
the model's one ModelQueue (app/batching/admission.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from app.batching.admission import ModelQueue
from app.batching.batcher import Batcher, BatchSettings, InferenceWorkers, OnIdle
from app.core.errors import QueueFull
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.tasks.attention_maps import AttentionHandler
from app.tasks.handlers import DecodeKey, SentimentHandler, TranslationHandler

IDLE_BATCHER_S = 300.0  # a decoding-option queue unused this long is retired


class BatcherPool:
    """Batchers by key, created on first use; dynamic keys (decoding options) retire when idle."""

    def __init__(self) -> None:
        self._batchers: dict[Hashable, Batcher[Any, Any]] = {}

    def get(self, key: Hashable, create: Callable[[OnIdle], Batcher[Any, Any]]) -> Batcher[Any, Any]:
        """The batcher of `key`; `create(on_idle)` makes it on first use (on_idle retires it from the pool)."""
        batcher = self._batchers.get(key)
        if batcher is None:
            batcher = self._batchers[key] = create(lambda b: self._retire(key, b))
        return batcher

    def _retire(self, key: Hashable, batcher: Batcher[Any, Any]) -> None:
        if self._batchers.get(key) is batcher:
            del self._batchers[key]

    def count(self, kind: str) -> int:
        """Live batchers whose key is a tuple starting with `kind` (e.g. "translation")."""
        return sum(isinstance(k, tuple) and k[0] == kind for k in self._batchers)

    def retire_idle(self, kind: str) -> bool:
        """Retire one idle batcher of `kind` (nothing queued or running) now; False when all are busy."""
        for key, batcher in self._batchers.items():
            if isinstance(key, tuple) and key[0] == kind and batcher.idle:
                del self._batchers[key]
                batcher.stop_soon()  # its loop ends at once: nothing to drain
                return True
        return False

    def __contains__(self, key: Hashable) -> bool:
        return key in self._batchers

    def __len__(self) -> int:
        return len(self._batchers)

    def items(self) -> list[tuple[Hashable, Batcher[Any, Any]]]:
        return list(self._batchers.items())

    async def close(self) -> None:
        """Drain and stop every batcher (their queued items are still computed)."""
        batchers, self._batchers = list(self._batchers.values()), {}
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

    def sentiment(self, name: str, handler: SentimentHandler) -> Batcher[Any, Any]:
        return self.pool.get(
            ("sentiment", name), lambda _: self._new(name, handler.run, name, handler.cost, self._policy())
        )

    def attention(self, name: str, handler: AttentionHandler) -> Batcher[Any, Any]:
        """Attention maps are rare and take the weights path: their own queue, one item per forward."""
        label = f"{name}/attention"
        policy = self._policy(expensive=True, max_batch_size=1)
        return self.pool.get(
            ("attention", name),
            lambda _: self._new(label, handler.run, name, handler.cost, policy, label=label),
        )

    def translation(self, name: str, handler: TranslationHandler, key: DecodeKey) -> Batcher[Any, Any]:
        """The queue of one model, target language and beam size (other options are per sentence). At most
        APP_MAX_DECODE_QUEUES live at once: a new one retires an idle one, or gets 429."""
        pool_key = ("translation", name, key)
        limit = self.settings.max_decode_queues
        full = pool_key not in self.pool and self.pool.count("translation") >= limit
        if full and not self.pool.retire_idle("translation"):
            raise QueueFull(
                f"{limit} distinct decoding queues (model, target_lang, beam_size) are in use, the limit "
                "(APP_MAX_DECODE_QUEUES); retry later or use one of theirs",
                1,
            )
        run, cost = partial(handler.run, key=key), partial(handler.cost, key=key)
        label = f"{name}:{key.target_lang}:beam{key.beam_size}"
        policy = self._policy(expensive=True, stoppable=True, idle_timeout_s=IDLE_BATCHER_S)
        return self.pool.get(
            pool_key, lambda on_idle: self._new(label, run, name, cost, policy, on_idle=on_idle)
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
        cost: Callable[[Any], int],
        policy: BatchSettings,
        *,
        label: str | None = None,
        on_idle: OnIdle | None = None,
    ) -> Batcher[Any, Any]:
        """A batcher of `model`, admitted against the model's queue limits."""
        assert self.workers is not None
        queue = self.model(model)
        return Batcher(
            name, run, self.workers, queue, policy, cost=cost, metrics=self.metrics, label=label, on_idle=on_idle
        )  # fmt: skip

"""The per-model queue limits a request is admitted against (its items and their work units: each task's
handler prices its items, app/tasks/handlers.py)."""

from __future__ import annotations

import math
from typing import Protocol

from app.core.errors import QueueFull


class Waiting(Protocol):
    """What admission reads of one of a model's batchers (app.batching.batcher.Batcher)."""

    def waiting(self) -> tuple[int, int]:
        """(items, work units) not yet on a worker."""
        ...

    def purge(self) -> None:
        """Drop the queued items of requests that are done."""
        ...

    def drain_seconds(self) -> float:
        """Seconds to run what waits at the recent batch rate."""
        ...


class ModelQueue:
    """What waits for one model in all of its batchers (each decoding mode, attention): the items and work
    units not yet on a worker, queued or in a batch waiting for one. Admission checks them against the
    model's limits, so distinct decoding options share one limit."""

    def __init__(self, model: str, max_items: int, max_work: int | None = None) -> None:
        assert max_items >= 1, max_items
        self.model, self.max_items, self.max_work = model, max_items, max_work
        self.batchers: set[Waiting] = set()  # live ones; a batcher adds and removes itself

    def waiting(self) -> tuple[int, int]:
        """(items, work units) waiting in every batcher of the model."""
        items = work = 0
        for b in self.batchers:
            i, w = b.waiting()
            items, work = items + i, work + w
        return items, work

    def admit(self, items: int, work: int) -> None:
        """QueueFull (429 + Retry-After) unless `items` and `work` more fit under the limits."""
        queued, queued_work = self.waiting()
        if not self._fits(queued + items, queued_work + work):  # first drop what requests that left queue
            for b in self.batchers:
                b.purge()
            queued, queued_work = self.waiting()
        if queued + items > self.max_items:
            raise QueueFull(
                f"the queue of {self.model} is full ({queued} of {self.max_items} items waiting, "
                "APP_MAX_QUEUE); retry later",
                self.retry_after(),
            )
        if self.max_work is not None and queued_work + work > self.max_work:
            raise QueueFull(
                f"the queue of {self.model} is full ({queued_work:,} of {self.max_work:,} work units "
                "waiting, APP_MAX_QUEUE_WORK); retry later",
                self.retry_after(),
            )

    def _fits(self, items: int, work: int) -> bool:
        return items <= self.max_items and (self.max_work is None or work <= self.max_work)

    def retry_after(self) -> int:
        """Seconds until what waits has run at the recent batch rates (at least 1)."""
        return max(1, math.ceil(sum(b.drain_seconds() for b in self.batchers)))

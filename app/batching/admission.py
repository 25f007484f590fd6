"""What a request costs, and the per-model queue limits it is admitted against.

A work unit is one token through a model: a classifier item costs its tokens; a translated sentence costs
its source tokens (the encoder) plus beam_size x its output length limit (decoder token-steps: the most its
decoding can take, EOS forced at the limit). On the shipped models a unit takes ~30-110 us of one core.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.core.errors import QueueFull
from app.tasks.handlers import DecodeKey, Sentence

if TYPE_CHECKING:
    from app.batching.batcher import Batcher


def sentence_work(key: DecodeKey, max_len: int) -> Callable[[Sentence], int]:
    """A sentence's work units under `key` (its own length limit) for a translator of max_len positions."""
    beam = key.beam_size
    return lambda s: len(s.ids) + beam * min(s.options(beam, max_len).limit(len(s.ids)), max_len)


def sentence_floor(key: DecodeKey, max_len: int, max_length: int | None = None) -> int:
    """The least a sentence can cost under `key` and `max_length` (one token: its EOS), known before
    tokenizing."""
    return sentence_work(key, max_len)(Sentence([0], max_length=max_length))


def token_work(item: Any) -> int:
    """A classifier item ((ids, text)) or an attention item (source, target): its tokens."""
    if isinstance(item, tuple):
        return len(item[0])
    return len(item.source) + len(item.target or [])


class ModelQueue:
    """What waits for one model in all of its batchers (each decoding mode, attention): the items and work
    units not yet on a worker, queued or in a batch waiting for one. Admission checks them against the
    model's limits, so distinct decoding options share one limit."""

    def __init__(self, model: str, max_items: int, max_work: int | None = None) -> None:
        assert max_items >= 1, max_items
        self.model, self.max_items, self.max_work = model, max_items, max_work
        self.batchers: set[Batcher[Any, Any]] = set()  # live ones; a batcher adds and removes itself

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

"""What a batcher (app/batching/batcher.py) queues and runs: one request's Pending results, its Items, a
Batch of them, and `run_live`, the part of a batch that runs in an inference worker's thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app.core.request_id import RequestInfo
from model.decoding import DecodingStopped

O = TypeVar("O")  # noqa: E741 - one result out


@dataclass(eq=False)
class Pending(Generic[O]):
    """One request: its Future resolves once every one of its items has a result."""

    future: asyncio.Future[list[O]]
    results: list[Any]
    remaining: int
    deadline: float  # loop.time() (monotonic)
    failed: bool = False  # set by the inference thread when one of its batches raised
    request: RequestInfo | None = None  # its X-Request-ID (batch logs name it); told its model and batch size

    def gone(self, now: float) -> bool:
        """Nobody waits for its results (done elsewhere, failed, or past its deadline)."""
        return self.failed or self.future.done() or now >= self.deadline


@dataclass(eq=False, slots=True)
class Item:
    pending: Pending[Any]
    index: int
    payload: Any
    queued_at: float


@dataclass(eq=False, slots=True)
class Batch:
    items: list[Item]
    work: int
    backlog: bool = False  # a whole batch more waited behind it: it may run beside the others (workers.py)
    started: bool = False  # set by the worker thread that runs it


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    skipped: int = 0  # not computed: their request was gone when the batch started
    stopped: int = 0  # decoding stopped between steps: every request of the batch had gone
    abandoned: int = 0  # computed, but their request had gone by the time the batch ended
    seconds_ewma: float = field(default=0.0)


@dataclass(frozen=True)
class BatchSettings:
    """How one batcher forms and runs its batches."""

    max_batch_size: int  # items per batch
    max_delay_s: float  # the longest the first queued item waits for more
    max_batch_work: int | None = None  # work units per batch (None: no limit; one item at least)
    expensive: bool = False  # runs in the workers' expensive lane (decoding, attention maps)
    stoppable: bool = False  # run takes should_stop= and may raise model.DecodingStopped
    idle_timeout_s: float | None = None  # with on_idle: retired after this long without items

    def __post_init__(self) -> None:
        assert self.max_batch_size >= 1, self.max_batch_size
        assert self.max_delay_s >= 0, self.max_delay_s


def run_live(
    batch: Batch, run: Callable[..., list[O]], stoppable: bool, offset: float
) -> tuple[list[Item], list[O] | None]:
    """In a worker thread: `run` the items still wanted when the worker gets to them (a batch may have
    waited behind another) -> (those items, their outputs); outputs None when decoding stopped because every
    request had gone. done() is a plain read; the loop's clock is time.monotonic() + `offset` (loop.time()
    itself may not be called off the loop: uvloop updates its clock there). stoppable: `run` takes
    should_stop=, checked between decoder steps (a few reads per request of the batch)."""
    batch.started = True
    t = time.monotonic() + offset
    live = [i for i in batch.items if not i.pending.gone(t)]
    if not live:
        return live, []
    payloads = [i.payload for i in live]
    try:
        if stoppable:
            pendings = list({id(i.pending): i.pending for i in live}.values())

            def should_stop() -> bool:
                t = time.monotonic() + offset
                return all(p.gone(t) for p in pendings)

            outputs = run(payloads, should_stop=should_stop)
        else:
            outputs = run(payloads)
        if len(outputs) != len(payloads):  # LitServe's "Batch size mismatch"
            raise RuntimeError(f"batch size mismatch: {len(payloads)} items in, {len(outputs)} results out")
    except DecodingStopped:
        return live, None
    except Exception:  # the loop fails these requests soon; a batch queued behind must skip them now
        for item in live:
            item.pending.failed = True
        raise
    return live, outputs

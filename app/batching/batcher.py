"""The scheduling of one model's batches, in the order a request meets it: admit, share, batch, run.

1. Admit (`ModelQueue.admit`): what waits for a model in all of its batchers (each decoding mode,
   attention), items and work units, against the model's limits (APP_MAX_QUEUE, APP_MAX_QUEUE_WORK): 429
   with Retry-After (the recent batch rate) when they would not fit, after dropping the items of requests
   that have left.
2. Share (`FairQueue.add`): one Batcher per batch-compatible key (model + decoding options) queues a
   request's items in start-time fair order (Goyal, Vin and Cheng, 1996), weighted by work units, per
   client (its address: app.core.request_id.RequestInfo.client). Each client has a finish tag: the virtual
   time at which what it has queued would be served if every client were served at an equal rate; an
   item's start tag is max(virtual time, its client's finish tag). So a client that queues 45 heavy
   sentences does not make a client with one sentence wait behind all 45; a client alone is plain FIFO.
3. Batch (`Batcher._collect`, then `FairQueue.take`): a batch goes when its items fill `max_batch_size`
   items or `max_batch_work` units, when the oldest item has waited `max_delay`, or as soon as an
   inference worker is free for it (waiting longer would only leave it idle: no added latency at low load,
   and under load batches grow while the workers run the previous ones). `take` hands out the smallest
   start tags first, FIFO within a client and among equal tags, cut at the batch's limits.
4. Run (`Batcher._execute`): the batch runs in a worker thread (app/batching/workers.py: expensive batches
   leave a lane to cheap ones; app/batching/batch.py: run_live); each result goes back to its own
   request's Future. Items of requests already done (timed out, disconnected, failed elsewhere) are skipped
   at batch time, and a decoding batch whose requests have all gone stops between two steps. A failing
   batch fails only its requests.

The batchers themselves (one per task, model and key) are made by app/runtime/queues.py from each task's `batching`.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from app.batching.batch import Batch, BatchSettings, BatchStats, Item, Pending, run_live
from app.batching.workers import InferenceWorkers
from app.core.errors import DeadlineExceeded, InferenceFailed, QueueFull, Unavailable
from app.core.metrics import Metrics
from app.core.request_id import CURRENT, RequestInfo

__all__ = ["BatchSettings", "BatchStats", "Batcher", "FairQueue", "InferenceWorkers", "ModelQueue", "OnIdle"]
log = logging.getLogger(__name__)
I = TypeVar("I")  # noqa: E741 - one item in
O = TypeVar("O")  # noqa: E741 - one result out
T = TypeVar("T")
MAX_IDS_LOGGED = 32  # ids named by one batch's log lines


class ModelQueue:
    """1. Admit: what waits for one model in all of its batchers: the items and work units not yet on a
    worker, queued or in a batch waiting for one. Distinct decoding options share one limit."""

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


class FairQueue(Generic[T]):
    """2. Share: items in start-tag order, each with its work units; `work`: the units of everything
    queued."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, T]] = []  # (start tag, arrival number, work units, item)
        self._finish: dict[str, float] = {}  # client -> finish tag of its last queued item
        self._vtime = 0.0  # the start tag of the item handed out last
        self._arrivals = 0
        self.work = 0

    def add(self, client: str, items: Sequence[T], works: Sequence[int]) -> None:
        """Queue one client's items (one request's), each after the one before it."""
        tag = max(self._vtime, self._finish.get(client, 0.0))
        for item, work in zip(items, works, strict=True):
            heapq.heappush(self._heap, (tag, self._arrivals, work, item))
            self._arrivals += 1
            tag += max(1, work)
        self._finish[client] = tag
        self.work += sum(works)

    def full(self, max_items: int, max_work: int | None, batches: int = 1) -> bool:
        """Whether the queue holds `batches` whole batches, by items or by work units."""
        return len(self._heap) >= batches * max_items or (
            max_work is not None and self.work >= batches * max_work
        )

    def take(self, max_items: int, max_work: int | None) -> tuple[list[T], int]:
        """3. The next batch and its work units: the first item whatever its work, then the next turns
        while they fit in max_items items and max_work units (None: no limit)."""
        heap = self._heap
        start, _, work, item = heapq.heappop(heap)
        batch = [item]
        while heap and len(batch) < max_items:
            if max_work is not None and work + heap[0][2] > max_work:
                break
            start, _, units, item = heapq.heappop(heap)
            batch.append(item)
            work += units
        self._vtime = start
        self.work -= work
        if len(self._finish) > 2 * len(heap) + 64:  # clients that are all served: their tags are past
            self._finish = {c: f for c, f in self._finish.items() if f > self._vtime}
        return batch, work

    def keep(self, wanted: Callable[[T], bool]) -> int:
        """Drop the items that are not `wanted` -> how many were dropped."""
        kept = [entry for entry in self._heap if wanted(entry[3])]
        dropped = len(self._heap) - len(kept)
        if dropped:
            heapq.heapify(kept)
            self._heap = kept
            self.work = sum(entry[2] for entry in kept)
        return dropped

    def oldest(self) -> T:
        """The item that has waited longest (the first arrival still queued), whatever its turn: O(n)."""
        return min(self._heap, key=lambda entry: entry[1])[3]

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[T]:
        return (entry[3] for entry in self._heap)


class Batcher(Generic[I, O]):
    """Queue + loop for one key; `run(items) -> results` executes on `workers` (one forward pass).

    queue: the model's admission limits, shared by all its batchers; label: the model label of its metrics
    and logs (default the queue's model).
    """

    def __init__(
        self,
        name: str,
        run: Callable[..., list[O]],
        workers: InferenceWorkers,
        queue: ModelQueue,
        settings: BatchSettings,
        *,
        metrics: Metrics | None = None,
        label: str | None = None,
        on_idle: Callable[[Batcher[Any, Any]], None] | None = None,
    ) -> None:
        self.name, self.model = name, label or queue.model
        self.settings = settings
        self.queue = queue
        self.queue.batchers.add(self)
        self._run, self._worker, self._metrics = run, workers, metrics
        # batch size and seconds histograms of the model, observed per batch (labelled once, here)
        self._histograms = metrics.batch_histograms(self.model) if metrics is not None else None
        self._on_idle = on_idle
        self._queue: FairQueue[Item] = FairQueue()  # 2. share, 3. cut
        # this key's submitted, unfinished batches (running or waiting for a worker), oldest first
        self._submitted: dict[asyncio.Task[None], Batch] = {}
        self._wakeup = asyncio.Event()
        self._closing = self._closed = False
        self.stats = BatchStats()
        # a context of its own: not that of the request that happened to create it (its request id)
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"batcher:{name}", context=contextvars.Context()
        )

    def __len__(self) -> int:
        """Items waiting: queued here, or in a submitted batch that no worker has started."""
        return self.waiting()[0]

    def waiting(self) -> tuple[int, int]:
        """(items, work units) queued here or in submitted batches not started yet."""
        items, work = len(self._queue), self._queue.work
        for batch in self._submitted.values():
            if not batch.started:
                items, work = items + len(batch.items), work + batch.work
        return items, work

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing submitted."""
        return not self._queue and not self._submitted

    def enqueue(
        self, payloads: Sequence[I], deadline: float, costs: list[int] | None = None
    ) -> asyncio.Future[list[O]]:
        """Queue one request's items; the Future gets their results in order (or the batch's error).
        QueueFull when the model's queue cannot take them. costs: each item's work units (default 1 each:
        the task prices its items, app.tasks.task.Job.costs)."""
        if self._closing or self._closed:
            raise Unavailable("the server is shutting down")
        works = [1] * len(payloads) if costs is None else costs
        self.queue.admit(len(payloads), sum(works))
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending: Pending[O] = Pending(
            loop.create_future(), [None] * len(payloads), len(payloads), deadline, request=CURRENT.get()
        )
        if not payloads:
            pending.future.set_result([])
        items = [Item(pending, i, p, now) for i, p in enumerate(payloads)]
        self._queue.add(pending.request.client if pending.request is not None else "", items, works)
        self._wakeup.set()
        return pending.future

    def purge(self) -> None:
        """Drop the queued items of requests that are done (left, timed out): they would only be skipped."""
        if dropped := self._queue.keep(lambda i: not i.pending.future.done()):
            self.stats.skipped += dropped

    def drain_seconds(self) -> float:
        """Seconds to run what waits here at the recent batch rate (0 when nothing waits)."""
        items, work = self.waiting()
        if not items:
            return 0.0
        batches = math.ceil(items / self.settings.max_batch_size)
        if self.settings.max_batch_work:
            batches = max(batches, math.ceil(work / self.settings.max_batch_work))
        return (batches + 1) * self.stats.seconds_ewma

    def stop_soon(self) -> None:
        """Stop accepting; the loop ends once what is queued has run (close() waits for that)."""
        self._closing = True
        self._wakeup.set()

    async def close(self) -> None:
        """Stop accepting, finish every queued item, then stop the loop."""
        self.stop_soon()
        await asyncio.shield(self._task)

    async def _loop(self) -> None:
        def done(task: asyncio.Task[None]) -> None:
            del self._submitted[task]
            self._wakeup.set()

        try:
            while (info := await self._collect()) is not None:
                task = asyncio.get_running_loop().create_task(self._execute_guarded(info))
                self._submitted[task] = info
                task.add_done_callback(done)
        finally:
            if self._submitted:  # drain: every submitted item gets its result
                await asyncio.gather(*self._submitted, return_exceptions=True)
            self._closed = True
            self.queue.batchers.discard(self)

    async def _collect(self) -> Batch | None:
        """The next batch (None: stop), as soon as one of these holds:

        - they fill a batch and at most `capacity` of this key's batches are submitted (capacity: the
          workers this kind of batch may hold): it goes to a free worker or is queued right behind a running
          batch, so that a worker moves on to it without a round trip through the event loop (busy sending
          responses at thousands of requests/s);
        - none of this key's batches runs and a worker is free for it: waiting would only leave it idle;
        - the first item has waited max_delay, and a worker is free for it or none of this key's batches runs.
        Otherwise they wait for more items, a free worker, or one of this key's batches to finish.
        """
        loop = asyncio.get_running_loop()
        running = self._submitted  # this key's batches on (or waiting for) a worker
        s = self.settings
        while True:
            if not self._queue:
                if self._closing:
                    return None
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), None if running else s.idle_timeout_s)
                except TimeoutError:
                    if not self._queue and self._on_idle is not None:  # no await since the check: no race
                        self._closed = True
                        self._on_idle(self)
                        return None
                continue
            if self._closing:
                break
            timer = None
            if self._queue.full(s.max_batch_size, s.max_batch_work):
                if len(running) <= self._worker.capacity(s.expensive, self._backlog()):
                    break
            else:
                free = self._worker.free_for(s.expensive)
                # the longest-waiting item's deadline: fair turns may put a newer one first
                flush_at = self._queue.oldest().queued_at + s.max_delay_s
                if (free and not running) or (loop.time() >= flush_at and (free or not running)):
                    break
                if loop.time() < flush_at:
                    timer = loop.call_at(flush_at, self._wakeup.set)
            self._wakeup.clear()
            self._worker.when_idle(self._wakeup.set)
            await self._wakeup.wait()  # a new item, the first item's deadline, a free worker, a batch done
            if timer is not None:
                timer.cancel()
        backlog = self._backlog()
        return Batch(*self._queue.take(s.max_batch_size, s.max_batch_work), backlog)  # fair turns, cut

    def _backlog(self) -> bool:
        """A whole batch more waits behind the next one: the workers are behind (InferenceWorkers.run)."""
        return self._queue.full(self.settings.max_batch_size, self.settings.max_batch_work, batches=2)

    async def _execute_guarded(self, batch: Batch) -> None:
        _log_as(item.pending.request for item in batch.items)  # this task's (and its thread's) logs
        try:
            await self._execute(batch)
        except Exception:  # a bug here must not wedge the queue: fail the batch, keep serving
            log.exception("batcher %s: unexpected error", self.name)
            for item in batch.items:
                if not item.pending.future.done():
                    item.pending.future.set_exception(InferenceFailed("internal batching error"))

    async def _execute(self, info: Batch) -> None:
        loop = asyncio.get_running_loop()
        batch = info.items
        start = time.perf_counter()
        try:
            offset = loop.time() - time.monotonic()  # the loop's clock, read in the worker thread
            live, outputs = await self._worker.run(
                run_live, info, self._run, self.settings.stoppable, offset,
                expensive=self.settings.expensive, backlog=info.backlog,
            )  # fmt: skip
        except Exception as e:
            log.exception("batch of %d item(s) failed in %s", len(batch), self.name)
            error = InferenceFailed(f"inference failed for this batch ({type(e).__name__}: {e})")
            for item in batch:
                if not item.pending.future.done():
                    item.pending.future.set_exception(error)
            self._record(len(batch), time.perf_counter() - start)
            return
        self.stats.skipped += len(batch) - len(live)
        if outputs is None:  # stopped: nobody waited any more
            self.stats.stopped += len(live)
            if self._metrics is not None:
                self._metrics.observe_dropped(self.model, stopped=len(live))
            live = []
        elif live:
            self._record(len(live), time.perf_counter() - start)
        computed = {id(item) for item in live}
        for item in batch:  # skipped: done already (timed out, client gone), failed in another batch, expired
            pending = item.pending
            if id(item) in computed or pending.future.done():
                continue
            if pending.failed:  # that batch's own failure may not have reached the loop yet
                pending.future.set_exception(
                    InferenceFailed("inference failed for another part of this request")
                )
            else:
                pending.future.set_exception(DeadlineExceeded("request timed out while queued"))
        abandoned = 0
        for item, out in zip(live, outputs or [], strict=True):
            pending = item.pending
            if (request := pending.request) is not None:  # the access line's model and batch size
                if self.model not in request.models:
                    request.models.append(self.model)
                request.batch_size = max(request.batch_size, len(live))
            if pending.future.done():  # gone while the batch ran: its result is dropped
                abandoned += 1
                continue
            pending.results[item.index] = out
            pending.remaining -= 1
            if pending.remaining == 0:
                pending.future.set_result(pending.results)
        if abandoned:
            self.stats.abandoned += abandoned
            if self._metrics is not None:
                self._metrics.observe_dropped(self.model, abandoned=abandoned)

    def _record(self, size: int, seconds: float) -> None:
        s = self.stats
        s.batches, s.items = s.batches + 1, s.items + size
        s.seconds_ewma = seconds if s.batches == 1 else 0.8 * s.seconds_ewma + 0.2 * seconds
        if self._histograms is not None:
            sizes, durations = self._histograms
            sizes.observe(size)
            durations.observe(seconds)


OnIdle = Callable[[Batcher[Any, Any]], None]


def _log_as(requests: Iterable[RequestInfo | None]) -> None:
    """Log the rest of this context (a batch's task, and the worker thread it runs in) under the ids of
    `requests` (unique, in order; the first MAX_IDS_LOGGED, then how many more)."""
    ids = list(dict.fromkeys(r.id for r in requests if r is not None))
    if len(ids) > MAX_IDS_LOGGED:
        ids[MAX_IDS_LOGGED:] = [f"+{len(ids) - MAX_IDS_LOGGED} more"]
    CURRENT.set(RequestInfo(",".join(ids)) if ids else None)

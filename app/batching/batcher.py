"""Cross-request dynamic batching (MLServer's AdaptiveBatcher, LitServe's collate loop).

One Batcher per batch-compatible key (model + decoding options). A request enqueues its items (texts or
sentences) and gets one Future for all of them; the loop flushes at `max_batch_size` items or
`max_batch_work` work units, when the monotonic deadline `first item queued + max_delay` passes, or as soon
as an inference worker is free for it (waiting longer would only leave it idle: no added latency at low
load, and under load batches grow while the workers run the previous ones). The batch runs in a worker
thread (app/batching/workers.py: expensive batches leave a lane to cheap ones); each result goes back to its own
request. Items of requests that are already done (timed out, disconnected, failed elsewhere) are skipped at
batch time, and a decoding batch whose requests have all gone stops between two steps. A failing batch
fails only its requests. Admission is per model (app/batching/admission.py: ModelQueue). Clients share a
queue fairly (app/batching/fair.py: by work units, per client address, and cut into batches there), not first
come first served.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app.batching.admission import ModelQueue
from app.batching.fair import FairQueue
from app.batching.workers import InferenceWorkers
from app.core.errors import DeadlineExceeded, InferenceFailed, Unavailable
from app.core.metrics import Metrics
from app.core.request_id import CURRENT, RequestInfo, serving
from model.decoding import DecodingStopped

__all__ = ["BatchSettings", "BatchStats", "Batcher", "InferenceWorkers", "OnIdle"]
log = logging.getLogger(__name__)
I = TypeVar("I")  # noqa: E741 - one item in
O = TypeVar("O")  # noqa: E741 - one result out


@dataclass(eq=False)
class _Pending(Generic[O]):
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
class _Item:
    pending: _Pending[Any]
    index: int
    payload: Any
    queued_at: float


@dataclass(eq=False, slots=True)
class _Batch:
    items: list[_Item]
    work: int
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


class Batcher(Generic[I, O]):
    """Queue + loop for one key; `run(items) -> results` executes on `workers` (one forward pass).

    queue: the model's admission limits, shared by all its batchers; cost(item) -> work units (default 1);
    label: the model label of its metrics and logs (default the queue's model).
    """

    def __init__(
        self,
        name: str,
        run: Callable[..., list[O]],
        workers: InferenceWorkers,
        queue: ModelQueue,
        settings: BatchSettings,
        *,
        cost: Callable[[I], int] | None = None,
        metrics: Metrics | None = None,
        label: str | None = None,
        on_idle: Callable[[Batcher[Any, Any]], None] | None = None,
    ) -> None:
        self.name, self.model = name, label or queue.model
        self.settings = settings
        self.queue = queue
        self.queue.batchers.add(self)
        self._run, self._worker, self._metrics, self._cost = run, workers, metrics, cost
        self._on_idle = on_idle
        self._queue: FairQueue[_Item] = FairQueue()  # fair turns and batch cuts (app/batching/fair.py)
        # this key's submitted, unfinished batches (running or waiting for a worker), oldest first
        self._submitted: dict[asyncio.Task[None], _Batch] = {}
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

    def costs(self, payloads: Sequence[I]) -> list[int]:
        """The work units of each of these items."""
        return [1] * len(payloads) if self._cost is None else [self._cost(p) for p in payloads]

    def enqueue(
        self, payloads: Sequence[I], deadline: float, costs: list[int] | None = None
    ) -> asyncio.Future[list[O]]:
        """Queue one request's items; the Future gets their results in order (or the batch's error).
        QueueFull when the model's queue cannot take them. costs: self.costs(payloads), when known."""
        if self._closing or self._closed:
            raise Unavailable("the server is shutting down")
        works = self.costs(payloads) if costs is None else costs
        self.queue.admit(len(payloads), sum(works))
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending: _Pending[O] = _Pending(
            loop.create_future(), [None] * len(payloads), len(payloads), deadline, request=CURRENT.get()
        )
        if not payloads:
            pending.future.set_result([])
        items = [_Item(pending, i, p, now) for i, p in enumerate(payloads)]
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

    async def _collect(self) -> _Batch | None:
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
                if len(running) <= self._worker.capacity(s.expensive):
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
        return _Batch(*self._queue.take(s.max_batch_size, s.max_batch_work))  # fair turns, cut to the limits

    async def _execute_guarded(self, batch: _Batch) -> None:
        serving(item.pending.request for item in batch.items)  # this task's (and its thread's) logs name them
        try:
            await self._execute(batch)
        except Exception:  # a bug here must not wedge the queue: fail the batch, keep serving
            log.exception("batcher %s: unexpected error", self.name)
            for item in batch.items:
                if not item.pending.future.done():
                    item.pending.future.set_exception(InferenceFailed("internal batching error"))

    async def _execute(self, info: _Batch) -> None:
        loop = asyncio.get_running_loop()
        batch = info.items
        start = time.perf_counter()
        try:
            offset = loop.time() - time.monotonic()  # the loop's clock, readable from the worker thread
            live, outputs = await self._worker.run(
                self._run_live, info, lambda: time.monotonic() + offset, expensive=self.settings.expensive
            )
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
            if pending.request is not None:
                pending.request.ran(self.model, len(live))
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

    def _run_live(self, info: _Batch, now: Callable[[], float]) -> tuple[list[_Item], list[O] | None]:
        """In a worker thread: run the items still wanted when the worker gets to them (a batch may have
        waited behind another); outputs None when decoding stopped because every request had gone.
        done() is a plain read; `now` is the loop's clock (loop.time() itself may not be called off the
        loop: uvloop updates its clock there)."""
        info.started = True
        t = now()
        live = [i for i in info.items if not i.pending.gone(t)]
        if not live:
            return live, []
        try:
            return live, self._run_checked(live, now)
        except DecodingStopped:
            return live, None
        except Exception:  # the loop fails these requests soon; a batch queued behind must skip them now
            for item in live:
                item.pending.failed = True
            raise

    def _run_checked(self, live: list[_Item], now: Callable[[], float]) -> list[O]:
        payloads = [i.payload for i in live]
        if self.settings.stoppable:
            pendings = list({id(i.pending): i.pending for i in live}.values())

            def should_stop() -> bool:  # between decoder steps: a few reads per request of the batch
                t = now()
                return all(p.gone(t) for p in pendings)

            outputs = self._run(payloads, should_stop=should_stop)
        else:
            outputs = self._run(payloads)
        if len(outputs) != len(payloads):  # LitServe's "Batch size mismatch"
            raise RuntimeError(f"batch size mismatch: {len(payloads)} items in, {len(outputs)} results out")
        return outputs

    def _record(self, size: int, seconds: float) -> None:
        s = self.stats
        s.batches, s.items = s.batches + 1, s.items + size
        s.seconds_ewma = seconds if s.batches == 1 else 0.8 * s.seconds_ewma + 0.2 * seconds
        if self._metrics is not None:
            self._metrics.observe_batch(self.model, size, seconds)


OnIdle = Callable[[Batcher[Any, Any]], None]

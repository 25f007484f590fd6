"""Cross-request dynamic batching (MLServer's AdaptiveBatcher, LitServe's collate loop).

One Batcher per batch-compatible key (model + decoding options). A request enqueues its items (texts or
sentences) and gets one Future for all of them; the loop flushes at `max_batch_size` items, when the
monotonic deadline `first item queued + max_delay` passes, or as soon as a shared inference worker is
idle (waiting longer would only leave it idle: no added latency at low load, and under load batches grow
while the workers run the previous ones). The batch runs in a worker thread; each result goes back to its
own request. Items of requests that are already done (timed out, disconnected, failed elsewhere) are skipped at
batch time. A failing batch fails only its requests.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from app.errors import DeadlineExceeded, InferenceFailed, QueueFull, Unavailable
from app.metrics import Metrics
from app.request_id import CURRENT, RequestInfo, serving

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


@dataclass(eq=False, slots=True)
class _Item:
    pending: _Pending[Any]
    index: int
    payload: Any
    queued_at: float


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    skipped: int = 0
    seconds_ewma: float = field(default=0.0)


class InferenceWorkers:
    """The threads that run forward passes (`workers` at a time), and whether all of them are busy.

    One worker serves one batch at a time with `threads` intra-op threads. On a CPU, two single-threaded
    workers running two batches side by side use the cores better than one two-threaded worker: an
    intra-op pool stalls at each op's barrier whenever the event loop takes one of its cores.
    """

    def __init__(self, workers: int = 1, threads: int = 0) -> None:
        self.workers = workers
        init = (torch.set_num_threads, (threads,)) if threads else (None, ())  # OpenMP: per thread
        self.executor = ThreadPoolExecutor(
            workers, thread_name_prefix="inference", initializer=init[0], initargs=init[1]
        )
        self.busy = 0  # calls submitted and not finished
        self._on_idle: set[Callable[[], None]] = set()

    @property
    def saturated(self) -> bool:
        """Every worker has a call (a new one would wait)."""
        return self.busy >= self.workers

    async def run(self, fn: Callable[..., O], *args: Any) -> O:
        self.busy += 1
        try:
            # in the caller's context: what the batch logs in the thread names its requests
            ctx = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(self.executor, ctx.run, fn, *args)
        finally:
            self.busy -= 1
            if self.busy < self.workers:
                callbacks, self._on_idle = self._on_idle, set()
                for callback in callbacks:
                    callback()

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) when a worker is next free."""
        self._on_idle.add(callback)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


class Batcher(Generic[I, O]):
    """Queue + loop for one key; `run(items) -> results` executes on `worker` (one forward pass)."""

    def __init__(
        self,
        name: str,
        run: Callable[[list[I]], list[O]],
        worker: InferenceWorkers,
        *,
        max_batch_size: int,
        max_delay_s: float,
        max_queue: int,
        metrics: Metrics | None = None,
        model: str = "",
        idle_timeout_s: float | None = None,
        on_idle: Callable[[Batcher[Any, Any]], None] | None = None,
    ) -> None:
        assert max_batch_size >= 1, max_batch_size
        assert max_queue >= 1, max_queue
        assert max_delay_s >= 0, max_delay_s
        self.name, self.model = name, model or name
        self.max_batch_size, self.max_delay_s, self.max_queue = max_batch_size, max_delay_s, max_queue
        self._run, self._worker, self._metrics = run, worker, metrics
        self._idle_timeout_s, self._on_idle = idle_timeout_s, on_idle
        self._queue: deque[_Item] = deque()
        # this key's submitted, unfinished batches (running or waiting for a worker): size, oldest first
        self._submitted: dict[asyncio.Task[None], int] = {}
        self._wakeup = asyncio.Event()
        self._closing = self._closed = False
        self.stats = BatchStats()
        # a context of its own: not that of the request that happened to create it (its request id)
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"batcher:{name}", context=contextvars.Context()
        )

    def __len__(self) -> int:
        """Items waiting: queued here, or in a batch submitted behind a running one."""
        waiting = list(self._submitted.values())[self._worker.workers :]  # the oldest ones have a worker
        return len(self._queue) + sum(waiting)

    def enqueue(self, payloads: Sequence[I], deadline: float) -> asyncio.Future[list[O]]:
        """Queue one request's items; the Future gets their results in order (or the batch's error)."""
        if self._closing or self._closed:
            raise Unavailable("the server is shutting down")
        if len(self) + len(payloads) > self.max_queue:
            raise QueueFull(
                f"queue {self.name} is full ({len(self)} of {self.max_queue} items queued); retry later",
                self.retry_after(),
            )
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending: _Pending[O] = _Pending(
            loop.create_future(), [None] * len(payloads), len(payloads), deadline, request=CURRENT.get()
        )
        if not payloads:
            pending.future.set_result([])
        self._queue.extend(_Item(pending, i, p, now) for i, p in enumerate(payloads))
        self._wakeup.set()
        return pending.future

    def retry_after(self) -> int:
        """Seconds until the queue has drained at the recent batch rate (at least 1)."""
        batches = math.ceil(len(self) / self.max_batch_size) + 1
        return max(1, math.ceil(batches * self.stats.seconds_ewma))

    async def close(self) -> None:
        """Stop accepting, finish every queued item, then stop the loop."""
        self._closing = True
        self._wakeup.set()
        await asyncio.shield(self._task)

    async def _loop(self) -> None:
        def done(task: asyncio.Task[None]) -> None:
            del self._submitted[task]
            self._wakeup.set()

        try:
            while batch := await self._collect():
                task = asyncio.get_running_loop().create_task(self._execute_guarded(batch))
                self._submitted[task] = len(batch)
                task.add_done_callback(done)
        finally:
            if self._submitted:  # drain: every submitted item gets its result
                await asyncio.gather(*self._submitted, return_exceptions=True)
            self._closed = True

    async def _collect(self) -> list[_Item]:
        """The next batch ([] = stop): the queued items, as soon as one of these holds:

        - they fill a batch and at most `workers` of this key's batches are submitted: it goes to a free
          worker or is queued right behind a running batch, so that a worker moves on to it without a
          round trip through the event loop (busy sending responses at thousands of requests/s);
        - none of this key's batches runs and a worker is free: waiting would only leave it idle;
        - the first item has waited max_delay, and a worker is free or none of this key's batches runs.
        Otherwise they wait for more items, a free worker, or one of this key's batches to finish.
        """
        loop = asyncio.get_running_loop()
        running = self._submitted  # this key's batches on (or waiting for) a worker
        while True:
            if not self._queue:
                if self._closing:
                    return []
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), None if running else self._idle_timeout_s)
                except TimeoutError:
                    if not self._queue and self._on_idle is not None:  # no await since the check: no race
                        self._closed = True
                        self._on_idle(self)
                        return []
                continue
            if self._closing:
                break
            timer = None
            if len(self._queue) >= self.max_batch_size:
                if len(running) <= self._worker.workers:
                    break
            else:
                free = not self._worker.saturated
                flush_at = self._queue[0].queued_at + self.max_delay_s
                if (free and not running) or (loop.time() >= flush_at and (free or not running)):
                    break
                if loop.time() < flush_at:
                    timer = loop.call_at(flush_at, self._wakeup.set)
            self._wakeup.clear()
            self._worker.when_idle(self._wakeup.set)
            await self._wakeup.wait()  # a new item, the first item's deadline, a free worker, a batch done
            if timer is not None:
                timer.cancel()
        n = min(self.max_batch_size, len(self._queue))
        return [self._queue.popleft() for _ in range(n)]

    async def _execute_guarded(self, batch: list[_Item]) -> None:
        serving(item.pending.request for item in batch)  # this task's (and its thread's) logs name them
        try:
            await self._execute(batch)
        except Exception:  # a bug here must not wedge the queue: fail the batch, keep serving
            log.exception("batcher %s: unexpected error", self.name)
            for item in batch:
                if not item.pending.future.done():
                    item.pending.future.set_exception(InferenceFailed("internal batching error"))

    async def _execute(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        try:
            offset = loop.time() - time.monotonic()  # the loop's clock, readable from the worker thread
            live, outputs = await self._worker.run(self._run_live, batch, lambda: time.monotonic() + offset)
        except Exception as e:
            log.exception("batch of %d item(s) failed in %s", len(batch), self.name)
            error = InferenceFailed(f"inference failed for this batch ({type(e).__name__}: {e})")
            for item in batch:
                if not item.pending.future.done():
                    item.pending.future.set_exception(error)
            self._record(len(batch), time.perf_counter() - start)
            return
        if live:
            self._record(len(live), time.perf_counter() - start)
        self.stats.skipped += len(batch) - len(live)
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
        for item, out in zip(live, outputs, strict=True):
            pending = item.pending
            if pending.request is not None:
                pending.request.ran(self.model, len(live))
            if pending.future.done():  # cancelled while the batch ran: drop its result
                continue
            pending.results[item.index] = out
            pending.remaining -= 1
            if pending.remaining == 0:
                pending.future.set_result(pending.results)

    def _run_live(self, batch: list[_Item], now: Callable[[], float]) -> tuple[list[_Item], list[O]]:
        """In a worker thread: run the items still wanted when the worker gets to them (a batch may have
        waited behind another). done() is a plain read; `now` is the loop's clock (loop.time() itself may
        not be called off the loop: uvloop updates its clock there)."""
        t = now()
        live = [
            i for i in batch if not (i.pending.failed or i.pending.future.done()) and t < i.pending.deadline
        ]
        try:
            return live, (self._run_checked([i.payload for i in live]) if live else [])
        except Exception:  # the loop fails these requests soon; a batch queued behind must skip them now
            for item in live:
                item.pending.failed = True
            raise

    def _run_checked(self, payloads: list[I]) -> list[O]:
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

    def __len__(self) -> int:
        return len(self._batchers)

    def items(self) -> list[tuple[Hashable, Batcher[Any, Any]]]:
        return list(self._batchers.items())

    async def close(self) -> None:
        """Drain and stop every batcher (their queued items are still computed)."""
        batchers, self._batchers = list(self._batchers.values()), {}
        await asyncio.gather(*(b.close() for b in batchers))

"""The inference workers: the threads that run forward passes, with a lane kept for cheap work.

Each of `workers` threads runs one call at a time. Calls are cheap (a classifier batch: milliseconds) or
expensive (decoding, attention maps: up to a second per batch). Expensive calls hold at most
`expensive_slots` workers (default all but one; the service's APP_EXPENSIVE_WORKERS), so with 2+ workers a
cheap call never waits behind more than the one running cheap call; otherwise calls are taken oldest first.
Cheap calls run at most `cheap_slots` at once (default every worker; the service's:
Settings.cheap_workers_count, 1 on a 2-core CPU whose event loop answers HTTP too), and on every worker
while a cheap call with a whole batch more behind it waits (`backlog`: the workers are behind).
With `lane_hold_s` the lane is kept only that long after the last cheap call: without cheap traffic expensive
calls take every worker (translation-only load keeps its throughput), and the first cheap call after a quiet
spell waits for at most one running batch. The threads pick their next call themselves, so a batch submitted
behind a running one starts the moment that one ends, without a round trip through the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from app.core.threads import name_os_thread

O = TypeVar("O")  # noqa: E741 - a call's result


@dataclass(eq=False, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    expensive: bool
    backlog: bool  # a cheap call with a batch more waiting behind it: cheap calls may pass cheap_slots
    future: Future[Any]


class InferenceWorkers:
    """`workers` threads with `threads` intra-op threads each (0: torch's default); the rest of the workers
    beyond `expensive_slots` is the cheap lane.

    On a CPU, two single-threaded workers running two batches side by side use the cores better than one
    two-threaded worker: an intra-op pool stalls at each op's barrier whenever the event loop takes one of
    its cores.
    """

    def __init__(
        self,
        workers: int = 1,
        threads: int = 0,
        expensive: int | None = None,
        lane_hold_s: float | None = None,
        cheap: int | None = None,
    ) -> None:
        """expensive: how many workers expensive calls may hold (default: all but one, at least 1);
        lane_hold_s: hold that limit only this long after a cheap call was last submitted (None: always);
        cheap: how many cheap calls may run at once (default: every worker)."""
        assert workers >= 1, workers
        self.workers = workers
        self.expensive_slots = max(1, min(workers, workers - 1 if expensive is None else expensive))
        self.cheap_slots = max(1, min(workers, workers if cheap is None else cheap))
        self.lane_hold_s = lane_hold_s
        self._last_cheap = -float("inf")  # time.monotonic() of the last cheap call (a float: atomic to read)
        self.busy = 0  # calls submitted and not finished (event loop side)
        self.busy_expensive = 0
        self.busy_cheap = 0
        self._on_idle: set[Callable[[], None]] = set()
        self._cond = threading.Condition()
        self._waiting: deque[_Call] = deque()  # submitted, not started; guarded by _cond
        self._running_expensive = 0  # guarded by _cond
        self._running_cheap = 0  # guarded by _cond
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._serve, args=(threads,), name=f"inference_{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def capacity(self, expensive: bool, backlog: bool = False) -> int:
        """How many calls of this kind may run at once now (backlog: cheap calls with more waiting)."""
        if expensive:
            return self._expensive_limit()
        return self.workers if backlog else self.cheap_slots

    def free_for(self, expensive: bool) -> bool:
        """A call of this kind submitted now would start at once."""
        if expensive:
            return self.busy < self.workers and self.busy_expensive < self._expensive_limit()
        return self.busy < self.workers and self.busy_cheap < self.cheap_slots

    def _expensive_limit(self) -> int:
        """expensive_slots while the lane is held (always, or within lane_hold_s of a cheap call), else all."""
        if self.lane_hold_s is None or time.monotonic() - self._last_cheap < self.lane_hold_s:
            return self.expensive_slots
        return self.workers

    @property
    def saturated(self) -> bool:
        """Every worker has a call (a new cheap one would wait)."""
        return not self.free_for(False)

    async def run(
        self, fn: Callable[..., O], *args: Any, expensive: bool = False, backlog: bool = False
    ) -> O:
        """fn(*args) on a worker; cancelled before it starts, it never runs. backlog: a cheap call with a whole
        batch more waiting behind it, which may start beside cheap_slots running ones."""
        self.busy += 1
        self.busy_expensive += expensive
        self.busy_cheap += not expensive
        if not expensive:
            self._last_cheap = time.monotonic()
        # in the caller's context: what the batch logs in the thread names its requests
        call = _Call(contextvars.copy_context().run, (fn, *args), expensive, backlog, Future())
        try:
            with self._cond:
                if self._stopping:
                    raise RuntimeError("the inference workers are shut down")
                self._waiting.append(call)
                if backlog and not expensive:  # the cheap calls that wait for a slot may start too
                    self._cond.notify_all()
                else:
                    self._cond.notify()
            return await asyncio.wrap_future(call.future)  # type: ignore[no-any-return]
        finally:
            self.busy -= 1
            self.busy_expensive -= expensive
            self.busy_cheap -= not expensive
            callbacks, self._on_idle = self._on_idle, set()  # a waiting batcher checks again for itself
            for callback in callbacks:
                callback()

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) when a call next finishes (a worker may be free for the caller)."""
        self._on_idle.add(callback)

    def shutdown(self) -> None:
        """Run the calls already submitted, then stop the threads."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()

    def _next(self) -> _Call | None:
        """The oldest waiting call this thread may start (under _cond)."""
        limit = self._expensive_limit()
        # past cheap_slots while a backlog waits: then the oldest cheap call first, as always
        cheap = self._running_cheap < self.cheap_slots or any(
            c.backlog and not c.expensive for c in self._waiting
        )
        for call in self._waiting:
            if self._running_expensive < limit if call.expensive else cheap:
                self._waiting.remove(call)
                self._running_expensive += call.expensive
                self._running_cheap += not call.expensive
                return call
        return None

    def _serve(self, threads: int) -> None:
        name_os_thread()
        if threads:
            torch.set_num_threads(threads)  # OpenMP: per thread
        while True:
            with self._cond:
                while (call := self._next()) is None:
                    if self._stopping and not self._waiting:
                        return
                    # a held lane expires without a notify: look again then
                    self._cond.wait(
                        None if self.lane_hold_s is None or not self._waiting else self.lane_hold_s
                    )
            if call.future.set_running_or_notify_cancel():
                try:
                    call.future.set_result(call.fn(*call.args))
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    call.future.set_exception(e)
            with self._cond:
                self._running_expensive -= call.expensive
                self._running_cheap -= not call.expensive
                if call.expensive or self.cheap_slots < self.workers:
                    self._cond.notify_all()  # a call may have waited for this slot

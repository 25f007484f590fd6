"""The model process's deadlines for the requests it queues without a task (the channel's Immediate
`submit`, at thousands a second): one timer, at the earliest deadline of all, instead of one per request
(app.serving.service.wait_all's), fails those past theirs with the same 504. The timer is a LazyTimer
(app/core/lazy_timer.py), as the HTTP side's call timers are."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

from app.core.errors import DeadlineExceeded
from app.core.lazy_timer import LazyTimer


class Deadlines:
    """`timeout_s`: the requests' timeout, named by the 504."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        # a heap of (deadline, order, a request's futures); answered ones leave at their deadline, emptied
        self._heap: list[tuple[float, int, list[asyncio.Future[Any]]]] = []
        self._order = itertools.count()
        self._timer: LazyTimer | None = (
            None  # at the earliest deadline (made on the loop, at the first track)
        )

    def track(self, futures: list[asyncio.Future[Any]], deadline: float) -> list[asyncio.Future[Any]]:
        """`futures` (a request's), whose first one not done fails with DeadlineExceeded at `deadline`
        (whoever waits for them answers that and cancels the rest, as wait_all does)."""
        heapq.heappush(self._heap, (deadline, next(self._order), futures))
        if self._timer is None:
            self._timer = LazyTimer(asyncio.get_running_loop())
        if not self._timer.pending or deadline < self._timer.due:
            self._timer.set(deadline, self._expire)
        return futures

    def _expire(self) -> None:
        assert self._timer is not None
        heap, now = self._heap, self._timer.loop.time()
        while heap and heap[0][0] <= now:
            for future in heapq.heappop(heap)[2]:
                if not future.done():
                    future.set_exception(DeadlineExceeded.after(self.timeout_s))
                    break
        if heap:
            self._timer.set(heap[0][0], self._expire)

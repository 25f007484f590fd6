"""The model process's deadlines for the requests it queues without a task (the channel's Immediate
`submit`, at thousands a second): one timer, at the earliest deadline of all, instead of one per request
(app.service.wait_all's), fails those past theirs with the same 504."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

from app.core.errors import DeadlineExceeded


class Deadlines:
    """`timeout_s`: the requests' timeout, named by the 504."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        # a heap of (deadline, order, a request's futures); answered ones leave at their deadline, emptied
        self._heap: list[tuple[float, int, list[asyncio.Future[Any]]]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def track(self, futures: list[asyncio.Future[Any]], deadline: float) -> list[asyncio.Future[Any]]:
        """`futures` (a request's), whose first one not done fails with DeadlineExceeded at `deadline`
        (whoever waits for them answers that and cancels the rest, as wait_all does)."""
        heapq.heappush(self._heap, (deadline, next(self._order), futures))
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)
        return futures

    def _expire(self) -> None:
        loop, heap = asyncio.get_running_loop(), self._heap
        now = loop.time()
        while heap and heap[0][0] <= now:
            for future in heapq.heappop(heap)[2]:
                if not future.done():
                    future.set_exception(DeadlineExceeded.after(self.timeout_s))
                    break
        self._timer_at, self._timer = float("inf"), None
        if heap:
            self._timer_at = heap[0][0]
            self._timer = loop.call_at(self._timer_at, self._expire)

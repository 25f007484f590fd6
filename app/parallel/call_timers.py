"""A channel's timers for its calls, on one loop timer: when a call starts watching its client (WATCH_AFTER_S
after it is sent) and when it expires (its deadline: the caller's 504).

An HTTP process sends thousands of calls a second and each used to arm two loop timers (asyncio.timeout and
the watcher's call_later) and cancel both when answered, well within either. Here a call pushes its due times
on a heap; one LazyTimer (app/core/lazy_timer.py) fires at the earliest, and an answered call's entries are
skipped when they come due (or dropped when the heap holds twice the entries its calls in flight can have).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Collection
from typing import Any

from app.core.lazy_timer import LazyTimer

WATCH, EXPIRE = 0, 1
SLACK = 64  # entries beyond four a call in flight before the answered ones are dropped


class CallTimers:
    """`due(call_id, kind, value)` at each due time `add`ed, for the calls still in `in_flight` then."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        in_flight: Collection[int],
        due: Callable[[int, int, Any], None],
    ) -> None:
        self.loop, self.in_flight, self.due = loop, in_flight, due
        self.heap: list[tuple[float, int, int, Any]] = []  # (due time, call id, WATCH or EXPIRE, value)
        self.timer = LazyTimer(loop)

    def add(self, when: float, call_id: int, kind: int, value: Any = None) -> None:
        heap = self.heap
        if len(heap) > 4 * len(self.in_flight) + SLACK:  # (a live call has up to 2 entries)
            heap[:] = [e for e in heap if e[1] in self.in_flight]
            heapq.heapify(heap)
        heapq.heappush(heap, (when, call_id, kind, value))
        if not self.timer.pending or heap[0][0] < self.timer.due:
            self.timer.set(heap[0][0], self._fire)

    def close(self) -> None:
        self.heap.clear()
        self.timer.close()

    def _fire(self) -> None:
        heap, now = self.heap, self.loop.time()
        try:
            while heap and heap[0][0] <= now:
                _, call_id, kind, value = heapq.heappop(heap)
                if call_id in self.in_flight:
                    self.due(call_id, kind, value)
        finally:  # one that raised (logged by the loop) leaves the others due on time
            if heap:
                self.timer.set(heap[0][0], self._fire)

"""Fair sharing of one batcher's queue between clients: start-time fair queuing (Goyal, Vin and Cheng, 1996)
weighted by work units.

Each client (its address: app.core.request_id.RequestInfo.client) has a finish tag: the virtual time at
which what it has queued would be served if every client were served at an equal rate. An item's start tag
is max(virtual time, its client's finish tag); the queue hands out the smallest start tag first, FIFO within
a client and among equal tags. So a client that queues 45 heavy sentences does not make a client with one
sentence wait behind all 45: the newcomer starts at the current virtual time. A client alone is plain FIFO.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    """A deque-like queue (append/extend, popleft, [0], len, iteration) in start-tag order."""

    def __init__(self, client_of: Callable[[T], str], work_of: Callable[[T], int]) -> None:
        self._client_of, self._work_of = client_of, work_of
        self._heap: list[tuple[float, int, T]] = []  # (start tag, arrival number, item)
        self._finish: dict[str, float] = {}  # client -> finish tag of its last queued item
        self._vtime = 0.0  # the start tag of the item handed out last
        self._arrivals = 0

    def append(self, item: T) -> None:
        client = self._client_of(item)
        start = max(self._vtime, self._finish.get(client, 0.0))
        self._finish[client] = start + max(1, self._work_of(item))
        heapq.heappush(self._heap, (start, self._arrivals, item))
        self._arrivals += 1

    def extend(self, items: Iterable[T]) -> None:
        for item in items:
            self.append(item)

    def popleft(self) -> T:
        start, _, item = heapq.heappop(self._heap)
        self._vtime = start
        if len(self._finish) > 2 * len(self._heap) + 64:  # clients that are all served: their tags are past
            self._finish = {c: f for c, f in self._finish.items() if f > self._vtime}
        return item

    def keep(self, wanted: Callable[[T], bool]) -> int:
        """Drop the items that are not `wanted` -> how many were dropped."""
        kept = [entry for entry in self._heap if wanted(entry[2])]
        dropped = len(self._heap) - len(kept)
        if dropped:
            heapq.heapify(kept)
            self._heap = kept
        return dropped

    def oldest(self) -> T:
        """The item that has waited longest (the first arrival still queued), whatever its turn: O(n)."""
        return min(self._heap, key=lambda entry: entry[1])[2]

    def __getitem__(self, index: int) -> T:
        if index != 0:
            raise IndexError("FairQueue gives its first item only")
        return self._heap[0][2]

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[T]:
        return (entry[2] for entry in self._heap)

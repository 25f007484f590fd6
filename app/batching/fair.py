"""One batcher's queue, where fair sharing and batch cutting are decided together: start-time fair queuing
(Goyal, Vin and Cheng, 1996) weighted by work units, cut into batches by items and work units.

Each client (its address: app.core.request_id.RequestInfo.client) has a finish tag: the virtual time at
which what it has queued would be served if every client were served at an equal rate. An item's start tag
is max(virtual time, its client's finish tag); `take` hands out the smallest start tags first, FIFO within a
client and among equal tags, up to a batch's limits. So a client that queues 45 heavy sentences does not make
a client with one sentence wait behind all 45: the newcomer starts at the current virtual time. A client
alone is plain FIFO.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Items in start-tag order, each with its work units; `work`: the units of everything queued."""

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

    def full(self, max_items: int, max_work: int | None) -> bool:
        """Whether the queue holds a whole batch, by items or by work units."""
        return len(self._heap) >= max_items or (max_work is not None and self.work >= max_work)

    def take(self, max_items: int, max_work: int | None) -> tuple[list[T], int]:
        """The next batch and its work units: the first item whatever its work, then the next turns while
        they fit in max_items items and max_work units (None: no limit)."""
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

"""Fair sharing between clients in a batcher's queue (issue 29, item 5): a client that queues many heavy items
does not make another client wait behind all of them (start-time fair queuing by work units)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.batching.batcher import Batcher, BatchSettings, FairQueue, InferenceWorkers, ModelQueue
from app.core.request_id import CURRENT, RequestInfo
from tests.app.conftest import eventually

pytestmark = pytest.mark.anyio
FAR = 1e9


def test_fair_queue_interleaves_clients_by_work_and_is_fifo_per_client() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue()  # items: (client, n)
    q.add("heavy", [("heavy", n) for n in range(5)], [10] * 5)
    q.add("light", [("light", 0), ("light", 1)], [10, 10])
    order, _ = q.take(len(q), None)
    assert [c for c, _ in order] == ["heavy", "light", "heavy", "light", "heavy", "heavy", "heavy"]
    assert [n for c, n in order if c == "heavy"] == list(range(5))
    assert q.work == 0
    q.add("a", [("a", 0), ("a", 1)], [1, 1])  # alone: FIFO
    assert q.take(2, None) == ([("a", 0), ("a", 1)], 2)
    q.add("a", [("a", 0)], [1])
    q.add("b", [("b", 0)], [3])
    assert q.keep(lambda i: i[0] == "b") == 1
    assert (list(q), q.work) == ([("b", 0)], 3)


def test_a_batch_is_cut_by_items_and_work_in_fair_order() -> None:
    """take: the first turn whatever its work, then the next turns while they fit."""
    q: FairQueue[str] = FairQueue()
    q.add("heavy", ["h0", "h1", "h2"], [8, 8, 8])
    q.add("light", ["l0"], [2])
    assert not q.full(5, None)  # 4 items, 26 units
    assert q.full(4, None)
    assert q.full(5, 26)
    assert q.take(4, 12) == (["h0", "l0"], 10)  # h1 would pass 12 units
    assert q.take(1, None) == (["h1"], 8)
    assert q.take(4, 4) == (["h2"], 8)  # alone over the limit: it still goes
    assert (len(q), q.work) == (0, 0)


def test_the_oldest_item_is_the_first_arrival_not_the_first_turn() -> None:
    """The batcher's flush deadline counts from the oldest item: a newcomer's turn comes first."""
    q: FairQueue[tuple[str, int]] = FairQueue()
    q.add("heavy", [("heavy", n) for n in range(3)], [10] * 3)
    q.take(1, None)
    q.add("light", [("light", 0)], [10])
    assert q.take(1, None) == ([("light", 0)], 10)  # its turn is next ...
    q.add("light", [("light", 1)], [10])
    assert q.oldest() == ("heavy", 1)  # ... but the heavy client's items have waited longer


async def test_a_light_client_is_served_before_a_heavy_clients_backlog() -> None:
    workers = InferenceWorkers()
    gate, running = threading.Event(), threading.Event()
    batches: list[list[str]] = []

    def run(items: list[str]) -> list[str]:
        running.set()
        assert gate.wait(10)
        batches.append(items)
        return items

    settings = BatchSettings(max_batch_size=4, max_delay_s=0.0)
    b: Batcher[str, str] = Batcher("q", run, workers, ModelQueue("q", 100), settings)

    def enqueue(client: str, items: list[str]) -> asyncio.Future[list[str]]:
        token = CURRENT.set(RequestInfo(f"{client}-request", client))
        try:
            return b.enqueue(items, FAR)
        finally:
            CURRENT.reset(token)

    first = enqueue("10.0.0.1", ["h0"])  # occupies the worker
    await asyncio.to_thread(running.wait, 5)
    await eventually(lambda: len(b._queue) == 0)
    heavy = enqueue("10.0.0.1", [f"h{i}" for i in range(1, 41)])  # ten batches of backlog
    light = enqueue("10.0.0.2", ["l0"])
    gate.set()
    assert await light == ["l0"]
    assert await heavy == [f"h{i}" for i in range(1, 41)]
    await first
    light_batch = next(n for n, batch in enumerate(batches) if "l0" in batch)
    assert light_batch <= 1, batches  # in the first batch after the running one, not behind all 40
    await b.close()
    workers.shutdown()

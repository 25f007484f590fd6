"""Fair sharing between clients in a batcher's queue (issue 29, item 5): a client that queues many heavy items
does not make another client wait behind all of them (start-time fair queuing by work units)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.batching.admission import ModelQueue
from app.batching.batcher import Batcher, BatchSettings, InferenceWorkers
from app.batching.fair import FairQueue
from app.core.request_id import CURRENT, RequestInfo
from tests.app.conftest import eventually

pytestmark = pytest.mark.anyio
FAR = 1e9


def test_fair_queue_interleaves_clients_by_work_and_is_fifo_per_client() -> None:
    q: FairQueue[tuple[str, int, int]] = FairQueue(lambda i: i[0], lambda i: i[2])  # (client, n, work)
    q.extend(("heavy", n, 10) for n in range(5))
    q.append(("light", 0, 10))
    q.append(("light", 1, 10))
    order = [q.popleft() for _ in range(len(q))]
    assert [c for c, _, _ in order] == ["heavy", "light", "heavy", "light", "heavy", "heavy", "heavy"]
    assert [n for c, n, _ in order if c == "heavy"] == list(range(5))
    q.extend([("a", 0, 1), ("a", 1, 1)])  # alone: FIFO
    assert [q.popleft()[1] for _ in range(2)] == [0, 1]
    q.extend([("a", 0, 1), ("b", 0, 1)])
    assert q.keep(lambda i: i[0] == "b") == 1
    assert list(q) == [("b", 0, 1)]


def test_the_oldest_item_is_the_first_arrival_not_the_first_turn() -> None:
    """The batcher's flush deadline counts from the oldest item: a newcomer's turn comes first."""
    q: FairQueue[tuple[str, int, int]] = FairQueue(lambda i: i[0], lambda i: i[2])
    q.extend(("heavy", n, 10) for n in range(3))
    q.popleft()
    q.append(("light", 0, 10))
    assert q[0] == ("light", 0, 10)  # its turn is next ...
    assert q.oldest() == ("heavy", 1, 10)  # ... but the heavy client's item has waited longer


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

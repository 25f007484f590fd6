"""The dynamic batcher on its own (MLServer's batcher tests): flushes, routing of results, skips, errors."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from app.batching.batcher import Batcher, BatchSettings, InferenceWorkers, ModelQueue
from app.core.errors import DeadlineExceeded, InferenceFailed, QueueFull, Unavailable
from app.core.metrics import Metrics
from app.runtime.queues import BatcherPool
from tests.app.conftest import eventually

pytestmark = pytest.mark.anyio
FAR = 1e9  # a deadline that never passes


class Recorder:
    """run(items) -> items * 10, recording every batch; optionally blocks or fails."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.started.set()
        assert self.gate.wait(10)
        self.batches.append(list(items))
        if -1 in items:
            raise ValueError("bad item -1")
        return [x * 10 for x in items]


class Blocker:
    """A call that holds the inference worker until `release` is set; `running` once it has the worker."""

    def __init__(self) -> None:
        self.running, self.release = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.running.set()
        assert self.release.wait(10)


@pytest.fixture
async def executor() -> AsyncIterator[InferenceWorkers]:
    worker = InferenceWorkers()
    yield worker
    worker.shutdown()


@pytest.fixture
def make(executor: InferenceWorkers) -> Callable[..., Batcher[int, int]]:
    def build(run: Callable[[list[int]], list[int]], max_queue: int = 100, **kw: Any) -> Batcher[int, int]:
        settings = BatchSettings(**({"max_batch_size": 4, "max_delay_s": 0.05} | kw))
        return Batcher("test", run, executor, ModelQueue("test", max_queue), settings)

    return build


async def first_batch_held(
    make: Callable[..., Batcher[int, int]], **kw: Any
) -> tuple[Recorder, Batcher[int, int], asyncio.Future[list[int]]]:
    """A batcher of one-item batches whose first request ([1]) holds the inference thread, running, until
    the test sets the Recorder's `gate`; kw: more BatchSettings or max_queue."""
    rec = Recorder()
    rec.gate.clear()
    b = make(rec, max_batch_size=1, max_delay_s=0.0, **kw)
    first = b.enqueue([1], FAR)
    await asyncio.to_thread(rec.started.wait, 5)
    return rec, b, first


@pytest.fixture
async def busy(executor: InferenceWorkers) -> AsyncIterator[Blocker]:
    """The inference thread held by another model's call until the test sets `release` (at teardown else)."""
    blocker = Blocker()
    other = asyncio.ensure_future(executor.run(blocker))
    await asyncio.to_thread(blocker.running.wait, 5)
    yield blocker
    blocker.release.set()
    await other


async def test_full_batch_flushes_before_the_deadline(make: Callable[..., Batcher[int, int]]) -> None:
    rec = Recorder()
    b = make(rec, max_delay_s=30.0)
    start = time.monotonic()
    results = await asyncio.gather(*(b.enqueue([i], FAR) for i in range(4)))
    assert time.monotonic() - start < 5
    assert results == [[0], [10], [20], [30]]
    assert rec.batches == [[0, 1, 2, 3]]
    await b.close()


async def test_idle_thread_takes_a_partial_batch_at_once(make: Callable[..., Batcher[int, int]]) -> None:
    rec = Recorder()
    b = make(rec, max_batch_size=32, max_delay_s=30.0)
    start = time.monotonic()
    results = await asyncio.gather(b.enqueue([1], FAR), b.enqueue([2, 3], FAR))  # queued in the same tick
    assert time.monotonic() - start < 5  # not the 30 s delay: waiting would only leave the thread idle
    assert results == [[10], [20, 30]]
    assert rec.batches == [[1, 2, 3]]
    await b.close()


async def test_busy_thread_deadline_flushes_a_partial_batch(
    make: Callable[..., Batcher[int, int]], executor: InferenceWorkers, busy: Blocker
) -> None:
    """While another model's batch runs, items wait for more until the first one's deadline, then flush."""
    rec = Recorder()
    b = make(rec, max_batch_size=32, max_delay_s=0.05)
    first, second = b.enqueue([1], FAR), b.enqueue([2, 3], FAR)
    await eventually(lambda: executor.busy == 2)  # past the deadline, the thread still busy: flushed
    third = b.enqueue([4], FAR)
    busy.release.set()
    assert await asyncio.gather(first, second, third) == [[10], [20, 30], [40]]
    assert rec.batches == [[1, 2, 3], [4]]
    await b.close()


async def test_batch_waits_for_the_thread_then_flushes_when_it_is_idle(
    make: Callable[..., Batcher[int, int]], executor: InferenceWorkers, busy: Blocker
) -> None:
    rec = Recorder()
    b = make(rec, max_batch_size=32, max_delay_s=30.0)
    first = b.enqueue([1], FAR)
    await eventually(lambda: executor._on_idle)  # the batcher waits for the thread with [1]
    second = b.enqueue([2], FAR)
    start = time.monotonic()
    busy.release.set()
    assert await asyncio.gather(first, second) == [[10], [20]]
    assert time.monotonic() - start < 5  # flushed when the thread freed up, not after 30 s
    assert rec.batches == [[1, 2]]
    await b.close()


async def test_batch_size_one_turns_batching_off(make: Callable[..., Batcher[int, int]]) -> None:
    rec = Recorder()
    b = make(rec, max_batch_size=1)
    assert await asyncio.gather(*(b.enqueue([i], FAR) for i in range(3))) == [[0], [10], [20]]
    assert rec.batches == [[0], [1], [2]]
    await b.close()


async def test_results_go_back_to_their_own_request_across_batches(
    make: Callable[..., Batcher[int, int]],
) -> None:
    rec = Recorder()
    b = make(rec, max_batch_size=3, max_delay_s=0.0)
    requests = [list(range(start, start + n)) for start, n in ((0, 5), (100, 1), (200, 4), (300, 2))]
    results = await asyncio.gather(*(b.enqueue(r, FAR) for r in requests))
    assert results == [[x * 10 for x in r] for r in requests]
    assert all(len(batch) <= 3 for batch in rec.batches)
    assert sorted(x for batch in rec.batches for x in batch) == sorted(x for r in requests for x in r)
    await b.close()


async def test_cancelled_requests_are_skipped_not_computed(make: Callable[..., Batcher[int, int]]) -> None:
    rec, b, first = await first_batch_held(make)  # the first batch blocks the inference thread
    gone, kept = b.enqueue([2], FAR), b.enqueue([3], FAR)
    gone.cancel()  # the client went away while queued
    rec.gate.set()
    assert await first == [10]
    assert await kept == [30]
    assert [2] not in rec.batches
    assert b.stats.skipped == 1
    await b.close()


async def test_expired_requests_get_deadline_exceeded_and_are_skipped(
    make: Callable[..., Batcher[int, int]],
) -> None:
    rec, b, first = await first_batch_held(make)
    late = b.enqueue([2], asyncio.get_running_loop().time())  # expires as it is queued
    rec.gate.set()
    assert await first == [10]
    with pytest.raises(DeadlineExceeded):
        await late
    assert [2] not in rec.batches
    await b.close()


async def test_an_error_fails_only_its_batch(make: Callable[..., Batcher[int, int]]) -> None:
    rec = Recorder()
    b = make(rec, max_batch_size=2, max_delay_s=0.0)
    ok1, bad, mate, ok2 = (b.enqueue(x, FAR) for x in ([1, 2], [-1], [5], [6, 7]))
    assert await ok1 == [10, 20]
    for fut in (bad, mate):  # -1 and 5 shared a batch: both requests fail, with the cause
        with pytest.raises(InferenceFailed, match="ValueError: bad item -1"):
            await fut
    assert await ok2 == [60, 70]
    assert await b.enqueue([8], FAR) == [80]  # still serving
    await b.close()


async def test_a_request_spanning_batches_fails_once_and_its_rest_is_skipped(
    make: Callable[..., Batcher[int, int]],
) -> None:
    rec = Recorder()
    b = make(rec, max_batch_size=1, max_delay_s=0.0)
    with pytest.raises(InferenceFailed):
        await b.enqueue([-1, 2, 3], FAR)
    assert await b.enqueue([4], FAR) == [40]  # queued after [2] and [3]: they are done with
    assert rec.batches == [[-1], [4]]
    await b.close()


async def test_result_count_mismatch_fails_the_batch(make: Callable[..., Batcher[int, int]]) -> None:
    b = make(lambda items: items[:-1])
    with pytest.raises(InferenceFailed, match="batch size mismatch: 2 items in, 1 results out"):
        await b.enqueue([1, 2], FAR)
    await b.close()


async def test_full_queue_raises_queue_full_with_retry_after(make: Callable[..., Batcher[int, int]]) -> None:
    rec, b, first = await first_batch_held(make, max_queue=2)
    queued = b.enqueue([2, 3], FAR)
    with pytest.raises(QueueFull) as info:
        b.enqueue([4], FAR)
    assert info.value.retry_after >= 1
    assert info.value.headers == {"Retry-After": str(info.value.retry_after)}
    rec.gate.set()
    assert await first == [10]
    assert await queued == [20, 30]
    await b.close()


async def test_close_finishes_queued_items_then_rejects(make: Callable[..., Batcher[int, int]]) -> None:
    rec = Recorder()
    rec.gate.clear()
    b = make(rec, max_batch_size=2, max_delay_s=10.0)
    futures = [b.enqueue([i], FAR) for i in range(5)]
    closing = asyncio.ensure_future(b.close())
    await eventually(lambda: b._closing)
    with pytest.raises(Unavailable):
        b.enqueue([9], FAR)
    rec.gate.set()
    await closing
    assert [await f for f in futures] == [[0], [10], [20], [30], [40]]


async def test_metrics_record_batch_sizes(executor: InferenceWorkers) -> None:
    metrics = Metrics()
    b: Batcher[int, int] = Batcher(
        "q", lambda xs: xs, executor, ModelQueue("m", 10), BatchSettings(8, 0.02), metrics=metrics
    )
    await asyncio.gather(*(b.enqueue([i], FAR) for i in range(3)))
    reg = metrics.registry
    assert reg.get_sample_value("transformer_serving_batch_size_count", {"model": "m"}) == 1
    assert reg.get_sample_value("transformer_serving_batch_size_sum", {"model": "m"}) == 3
    await b.close()


async def test_pool_retires_idle_dynamic_batchers(executor: InferenceWorkers) -> None:
    pool = BatcherPool()

    def create(on_idle: Callable[[Batcher[Any, Any]], None]) -> Batcher[Any, Any]:
        settings = BatchSettings(max_batch_size=2, max_delay_s=0.0, idle_timeout_s=0.05)
        return Batcher("dyn", lambda xs: xs, executor, ModelQueue("dyn", 10), settings, on_idle=on_idle)

    first = pool.add("k", create, dynamic=True)
    assert await first.enqueue([1], FAR) == [1]
    await eventually(lambda: len(pool) == 0)  # retired after 0.05 s without items
    second = pool.add("k", create, dynamic=True)
    assert second is not first
    assert await second.enqueue([2], FAR) == [2]
    await pool.close()


async def test_a_full_batch_queues_behind_the_running_one(
    make: Callable[..., Batcher[int, int]], executor: InferenceWorkers
) -> None:
    """The thread goes from batch to batch without waiting for the event loop; a partial one waits."""
    rec = Recorder()
    rec.gate.clear()
    b = make(rec, max_batch_size=2, max_delay_s=30.0)
    peak, run = 0, executor.run

    async def counted(
        fn: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:  # calls submitted at once, at most
        nonlocal peak
        peak = max(peak, executor.busy + 1)
        return await run(fn, *args, **kw)

    executor.run = counted  # type: ignore[method-assign]
    first = b.enqueue([1, 2], FAR)
    await asyncio.to_thread(rec.started.wait, 5)
    partial = b.enqueue([3], FAR)
    await eventually(lambda: executor._on_idle)  # one item is not a batch: it waits for the running one
    full = b.enqueue([4], FAR)  # [3, 4] is full: submitted behind the running batch
    await eventually(lambda: executor.busy == 2)
    third = b.enqueue([5, 6], FAR)
    assert len(b) == 4  # [3, 4] waits behind the running batch; [5, 6] in the queue
    rec.gate.set()
    assert await asyncio.gather(first, partial, full, third) == [[10, 20], [30], [40], [50, 60]]
    assert rec.batches == [[1, 2], [3, 4], [5, 6]]  # [3] never ran alone
    assert peak == 2  # at most two of a key's batches are submitted
    await b.close()


async def test_a_request_cancelled_while_its_batch_waits_behind_is_skipped(
    make: Callable[..., Batcher[int, int]], executor: InferenceWorkers
) -> None:
    rec, b, first = await first_batch_held(make)
    gone = b.enqueue([2], FAR)  # a full batch: submitted behind [1] at once
    await eventually(lambda: executor.busy == 2)
    gone.cancel()
    rec.gate.set()
    assert await first == [10]
    assert await b.enqueue([3], FAR) == [30]
    assert rec.batches == [[1], [3]]
    assert b.stats.skipped == 1
    await b.close()


async def test_two_workers_run_two_full_batches_side_by_side() -> None:
    workers = InferenceWorkers(2, threads=1)
    both = threading.Barrier(2)

    def run(items: list[int]) -> list[int]:
        both.wait(5)  # raises BrokenBarrierError unless the other batch runs at the same time
        return [x * 10 for x in items]

    b = Batcher(
        "test", run, workers, ModelQueue("test", 100), BatchSettings(max_batch_size=2, max_delay_s=30.0)
    )
    assert await asyncio.gather(b.enqueue([1, 2], FAR), b.enqueue([3, 4], FAR)) == [[10, 20], [30, 40]]
    assert b.stats.batches == 2
    await b.close()
    workers.shutdown()


async def test_a_part_queued_behind_a_failed_part_is_not_computed(
    make: Callable[..., Batcher[int, int]], executor: InferenceWorkers
) -> None:
    rec = Recorder()
    rec.gate.clear()
    b = make(rec, max_batch_size=1, max_delay_s=0.0)
    request = b.enqueue([-1, 2], FAR)  # two batches of one; [2] is submitted behind [-1]
    await asyncio.to_thread(rec.started.wait, 5)
    await eventually(lambda: executor.busy == 2)
    rec.gate.set()
    with pytest.raises(InferenceFailed):
        await request
    assert await b.enqueue([3], FAR) == [30]  # queued after [2]: [2] is done with
    assert rec.batches == [[-1], [3]]
    await b.close()


async def test_a_part_skipped_because_another_failed_gets_500_not_504(
    make: Callable[..., Batcher[int, int]],
) -> None:
    """The thread skips it before the failure of the other batch reaches the loop (two workers)."""
    from app.batching.batch import Batch, Item, Pending

    b = make(Recorder())
    loop = asyncio.get_running_loop()
    pending: Pending[int] = Pending(loop.create_future(), [None, None], 2, FAR, failed=True)
    await b._execute(Batch([Item(pending, 1, 2, loop.time())], 1))
    with pytest.raises(InferenceFailed, match="another part"):
        await pending.future
    await b.close()


async def test_a_partial_batch_goes_to_a_free_worker_after_max_delay() -> None:
    """With one batch of the key running and a worker free, a partial batch waits max_delay, not for it."""
    workers = InferenceWorkers(2, threads=1)
    gate, first_started = threading.Event(), threading.Event()

    def run(items: list[int]) -> list[int]:
        if 1 in items:
            first_started.set()
            assert gate.wait(10)
        return [x * 10 for x in items]

    b = Batcher(
        "test", run, workers, ModelQueue("test", 100), BatchSettings(max_batch_size=8, max_delay_s=0.02)
    )
    first = b.enqueue([1], FAR)
    await asyncio.to_thread(first_started.wait, 5)
    start = time.monotonic()
    assert await b.enqueue([2], FAR) == [20]  # served by the other worker while [1] still runs
    assert 0.015 <= time.monotonic() - start < 5
    assert not first.done()
    gate.set()
    assert await first == [10]
    await b.close()
    workers.shutdown()


async def test_each_worker_runs_with_its_intra_op_threads() -> None:
    import torch

    workers = InferenceWorkers(2, threads=1)
    assert await asyncio.gather(*(workers.run(torch.get_num_threads) for _ in range(4))) == [1] * 4
    workers.shutdown()

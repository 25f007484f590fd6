"""app.serving.service.wait_all: results, the first error, 504 at the deadline, a client leaving, our own cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.batching.wait import WATCH_AFTER_S
from app.core.errors import ClientDisconnected, DeadlineExceeded
from app.serving.service import wait_all

pytestmark = pytest.mark.anyio


async def test_results_in_order_and_the_first_error() -> None:
    loop = asyncio.get_running_loop()
    a, b = loop.create_future(), loop.create_future()
    loop.call_soon(b.set_result, [2])
    loop.call_later(0.01, a.set_result, [1])
    assert await wait_all([a, b], loop.time() + 5, None, 5) == [[1], [2]]
    c, d = loop.create_future(), loop.create_future()
    loop.call_soon(d.set_exception, ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        await wait_all([c, d], loop.time() + 5, None, 5)


async def test_deadline_and_disconnect() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(DeadlineExceeded, match="timed out after 0.05 s"):
        await wait_all([loop.create_future()], loop.time() + 0.05, None, 0.05)

    async def gone() -> None:
        await asyncio.sleep(0.01)

    with pytest.raises(ClientDisconnected):
        await wait_all([loop.create_future()], loop.time() + 5, gone, 5)

    async def broken() -> None:
        raise RuntimeError("watcher bug")

    fut = loop.create_future()
    loop.call_later(0.05, fut.set_result, [1])
    assert await wait_all([fut], loop.time() + 5, broken, 5) == [[1]]  # a failing watcher is no disconnect


async def test_our_own_cancellation_wins_over_the_deadline() -> None:
    """The deadline timer and the caller's cancel() in the same loop tick: CancelledError, not 504."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.02
    task = asyncio.create_task(wait_all([loop.create_future()], deadline, None, 0.02))
    await asyncio.sleep(0)  # the task waits; its timer is set for `deadline`
    loop.call_at(deadline + 0.001, task.cancel)
    time.sleep(0.05)  # both callbacks are due: the timer runs first, then the cancel
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_watcher_starts_late_and_the_deadline_still_holds() -> None:
    """Requests answered within WATCH_AFTER_S never start a watcher task; later ones do, and the deadline
    holds on that path too."""
    loop = asyncio.get_running_loop()
    started: list[float] = []

    async def never_leaves() -> None:
        started.append(loop.time())
        await asyncio.Event().wait()

    fast = loop.create_future()
    loop.call_later(WATCH_AFTER_S / 5, fast.set_result, [1])
    assert await wait_all([fast], loop.time() + 5, never_leaves, 5) == [[1]]
    assert started == []
    t0 = loop.time()
    with pytest.raises(DeadlineExceeded):
        await wait_all([loop.create_future()], t0 + WATCH_AFTER_S + 0.1, never_leaves, 0.15)
    assert len(started) == 1
    assert started[0] - t0 >= WATCH_AFTER_S * 0.9
    assert loop.time() - t0 < WATCH_AFTER_S + 1.0

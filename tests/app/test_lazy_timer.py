"""app.core.lazy_timer.LazyTimer: the callback runs once at the due time last set, never when cleared, and
moving the due time later arms no new loop timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from app.core.lazy_timer import LazyTimer

pytestmark = pytest.mark.anyio

WRONG: list[
    str
] = []  # callbacks that must not run record themselves here (a loop callback cannot fail a test)


def wrong(name: str) -> Callable[[], object]:
    return lambda: WRONG.append(name)


async def fired_at(timer: LazyTimer, due: float) -> float:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[float] = loop.create_future()
    timer.set(due, lambda: done.set_result(loop.time()))
    return await asyncio.wait_for(done, 5)


async def test_a_later_due_time_keeps_the_armed_timer_and_fires_then() -> None:
    loop = asyncio.get_running_loop()
    timer = LazyTimer(loop)
    now = loop.time()
    timer.set(now + 0.01, wrong("replaced"))
    handle = timer.handle
    calls: list[float] = []
    timer.set(now + 0.05, lambda: calls.append(loop.time()))
    assert timer.handle is handle  # no new loop timer
    while not calls:
        await asyncio.sleep(0.005)
    assert calls[0] >= now + 0.05
    await asyncio.sleep(0.02)
    assert len(calls) == 1
    assert not timer.pending
    assert "replaced" not in WRONG


async def test_an_earlier_due_time_fires_then() -> None:
    loop = asyncio.get_running_loop()
    timer = LazyTimer(loop)
    now = loop.time()
    timer.set(now + 30, wrong("replaced"))
    assert await fired_at(timer, now + 0.01) < now + 5
    timer.close()
    assert "replaced" not in WRONG


async def test_a_cleared_timer_calls_nothing_and_a_closed_one_holds_no_loop_timer() -> None:
    loop = asyncio.get_running_loop()
    timer = LazyTimer(loop)
    timer.set(loop.time() + 0.01, wrong("cleared"))
    timer.clear()
    assert not timer.pending
    while timer.handle is not None:  # the armed timer fires and finds nothing
        await asyncio.sleep(0.005)
    assert "cleared" not in WRONG
    timer.set(loop.time() + 30, wrong("closed"))
    handle = timer.handle
    timer.close()
    assert handle is not None
    assert handle.cancelled()
    assert timer.handle is None


async def test_a_callback_may_set_the_next_due_time() -> None:
    loop = asyncio.get_running_loop()
    timer = LazyTimer(loop)
    calls: list[int] = []
    done = asyncio.Event()

    def again() -> None:
        calls.append(1)
        if len(calls) < 3:
            timer.set_in(0.005, again)
        else:
            done.set()

    timer.set_in(0.005, again)
    await asyncio.wait_for(done.wait(), 5)
    assert len(calls) == 3

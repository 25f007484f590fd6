"""The model process's one deadline timer for the requests it queues without a task
(app/parallel/waiting.py): each request's first unfinished future fails with the 504 of one process at its
deadline, and nothing else does."""

from __future__ import annotations

import asyncio

import pytest

from app.core.errors import DeadlineExceeded
from app.parallel.waiting import Deadlines

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_each_request_fails_at_its_own_deadline_and_no_sooner() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(timeout_s=2.0)
    now = loop.time()
    done, waiting = loop.create_future(), loop.create_future()
    done.set_result([0.5])
    later = [loop.create_future()]
    deadlines.track(later, now + 3600)  # tracked first: the timer moves to the earlier one below
    first = deadlines.track([done, waiting], now + 0.02)
    assert first == [done, waiting]
    with pytest.raises(DeadlineExceeded) as error:
        await waiting
    assert error.value.status_code == 504
    assert str(error.value) == str(DeadlineExceeded.after(2.0))
    assert done.result() == [0.5]  # a finished future keeps its result
    assert not later[0].done()  # its deadline is an hour away
    answered = [loop.create_future()]
    deadlines.track(answered, now + 0.03)
    answered.clear()  # what the channel does once it has answered: nothing left to fail
    last = [loop.create_future()]
    deadlines.track(last, now + 0.04)
    with pytest.raises(DeadlineExceeded):
        await last[0]
    assert not later[0].done()
    later[0].cancel()

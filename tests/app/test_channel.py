"""app/parallel pieces in one process: the channel between processes (over a real Unix socket), metric
merging, and the split of the connection limit."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from app.core.errors import ClientDisconnected, QueueFull, invalid
from app.core.request_id import CURRENT, RequestInfo
from app.core.settings import Settings
from app.parallel.call_timers import SLACK
from app.parallel.channel import CallExpired, Channel, ChannelClosed, Immediate
from app.parallel.frames import HEADER
from app.parallel.http import share
from app.parallel.merge import merge, render

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Callee:
    """The model process's side: handlers that record what they saw."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()

    async def echo(self, *args: Any, **kwargs: Any) -> Any:
        info = CURRENT.get()
        if info is not None:
            info.ran("m", 7)
        return args, kwargs, (info.id, info.client) if info else None

    async def full(self) -> None:
        raise QueueFull("the queue of m is full", 3)

    async def bad(self) -> None:
        raise invalid(("text",), "too long", "too_long")

    async def wait_for_leaving(self, disconnected: Any = None) -> str:
        self.started.set()
        await disconnected()
        self.left.set()
        return "left"

    def parts(self, n: int, fail: bool = False) -> list[asyncio.Future[Any]]:
        """An Immediate handler: n futures, settled later (the model process's submit)."""
        self.futures = [asyncio.get_running_loop().create_future() for _ in range(n)]
        self.request = CURRENT.get()
        if fail:
            raise QueueFull("the queue of m is full", 3)
        self.started.set()
        return list(self.futures)  # the channel empties the list it gets once answered

    async def forever(self) -> None:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            self.cancelled.set()


@pytest.fixture(params=["streams", "threads"])
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Channel, Callee]]:
    """A caller on asyncio streams; the callee on streams too, or (as in the model process) on a socket
    read and written by threads."""
    callee = Callee()
    handlers: dict[str, Any] = {
        n: getattr(callee, n) for n in ("echo", "full", "bad", "wait_for_leaving", "forever")
    }
    handlers["parts"] = Immediate(callee.parts)
    served: list[Channel] = []

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(channel := Channel(reader, writer, handlers))
        await channel.serve()

    async def accepted(sock: socket.socket) -> None:
        served.append(channel := Channel.threaded(sock, handlers))
        await channel.serve()

    path = str(tmp_path / "s.sock")
    if request.param == "threads":
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()
        listener.setblocking(False)

        async def accept() -> None:
            while True:
                sock, _ = await asyncio.get_running_loop().sock_accept(listener)
                tasks.add(asyncio.create_task(accepted(sock)))

        tasks: set[asyncio.Task[None]] = set()
        server: Any = asyncio.create_task(accept())
        server.close = lambda: (server.cancel(), listener.close())
    else:
        server = await asyncio.start_unix_server(connected, path=path)
    caller = Channel(*await asyncio.open_unix_connection(path), {})
    task = asyncio.create_task(caller.serve())
    try:
        yield caller, callee
    finally:
        caller.close()
        await task
        server.close()
        for c in served:
            c.close()


async def test_a_call_returns_and_tells_the_callers_request_what_ran(pair: tuple[Channel, Callee]) -> None:
    caller, _ = pair
    info = RequestInfo("rid-1", client="10.0.0.7")  # the client: whom the model process's fair queues serve
    CURRENT.set(info)
    assert await caller.call("echo", 1, "x", k=2) == ((1, "x"), {"k": 2}, ("rid-1", "10.0.0.7"))
    assert (info.models, info.batch_size) == (["m"], 7)  # the access line's model and batch size


async def test_errors_cross_with_their_class_status_and_headers(pair: tuple[Channel, Callee]) -> None:
    caller, _ = pair
    with pytest.raises(QueueFull) as full:
        await caller.call("full")
    assert (full.value.status_code, full.value.headers, full.value.retry_after) == (
        429,
        {"Retry-After": "3"},
        3,
    )
    with pytest.raises(type(invalid(("a",), "b"))) as bad:
        await caller.call("bad")
    assert bad.value.errors()[0]["loc"] == ("body", "text")


async def test_a_client_that_leaves_is_seen_by_the_callee(pair: tuple[Channel, Callee]) -> None:
    caller, callee = pair
    gone = asyncio.Event()
    answer = asyncio.create_task(caller.call("wait_for_leaving", disconnected=gone.wait))
    await callee.started.wait()
    gone.set()
    assert await answer == "left"
    assert callee.left.is_set()


async def test_a_cancelled_call_cancels_the_callee(pair: tuple[Channel, Callee]) -> None:
    caller, callee = pair
    call = asyncio.create_task(caller.call("forever"))
    await callee.started.wait()
    call.cancel()
    await asyncio.wait_for(callee.cancelled.wait(), 10)


async def test_an_expired_call_raises_here_and_is_cancelled_there(pair: tuple[Channel, Callee]) -> None:
    caller, callee = pair
    loop = asyncio.get_running_loop()
    with pytest.raises(CallExpired):
        await caller.call("forever", expires=loop.time() + 0.05)
    await asyncio.wait_for(callee.cancelled.wait(), 10)
    assert await caller.call("echo", 1, expires=loop.time() + 30) == ((1,), {}, None)  # answered in time


async def test_answered_calls_leave_no_timers_behind(pair: tuple[Channel, Callee]) -> None:
    caller, _ = pair
    gone = asyncio.Event()
    loop = asyncio.get_running_loop()
    for i in range(500):
        await caller.call("echo", i, disconnected=gone.wait, expires=loop.time() + 30)
    timers = caller._timers
    assert len(timers.heap) <= 4 * len(caller._waiting) + SLACK + 1  # answered calls' entries dropped
    assert not caller._watchers  # none answered late enough to start watching


async def test_calls_fail_when_the_other_end_goes(pair: tuple[Channel, Callee]) -> None:
    caller, callee = pair
    call = asyncio.create_task(caller.call("forever"))
    await callee.started.wait()
    caller.writer.close()  # as if the other process died: the reader sees the end
    with pytest.raises(ChannelClosed):
        await call
    with pytest.raises(ChannelClosed):
        await caller.call("echo")


async def test_an_immediate_handler_is_answered_with_its_futures_results(
    pair: tuple[Channel, Callee],
) -> None:
    caller, callee = pair
    CURRENT.set(RequestInfo("rid-2", client="10.0.0.8"))
    call = asyncio.create_task(caller.call("parts", 2))
    await callee.started.wait()
    assert callee.request is not None
    assert (callee.request.id, callee.request.client) == ("rid-2", "10.0.0.8")
    callee.request.ran("m", 5)
    callee.futures[1].set_result([0.5])
    callee.futures[0].set_result([0.25, 0.75])
    assert await call == [[0.25, 0.75], [0.5]]
    assert await caller.call("parts", 0) == []
    with pytest.raises(QueueFull):
        await caller.call("parts", 1, fail=True)


async def test_an_immediate_calls_first_error_is_its_answer_and_the_rest_cancelled(
    pair: tuple[Channel, Callee],
) -> None:
    caller, callee = pair
    call = asyncio.create_task(caller.call("parts", 2))
    await callee.started.wait()
    callee.futures[1].set_exception(QueueFull("late", 1))
    with pytest.raises(QueueFull):
        await call
    assert callee.futures[0].cancelled()


async def test_a_client_that_leaves_an_immediate_call_cancels_its_futures(
    pair: tuple[Channel, Callee],
) -> None:
    caller, callee = pair
    gone = asyncio.Event()
    call = asyncio.create_task(caller.call("parts", 1, disconnected=gone.wait))
    await callee.started.wait()
    gone.set()  # the watcher starts after WATCH_AFTER_S; then LEFT crosses
    with pytest.raises(ClientDisconnected):
        await call
    assert callee.futures[0].cancelled()
    callee.started.clear()
    call = asyncio.create_task(caller.call("parts", 1))
    await callee.started.wait()
    call.cancel()  # CANCEL
    while not callee.futures[0].cancelled():
        await asyncio.sleep(0)


async def test_a_bad_frame_closes_the_channel(pair: tuple[Channel, Callee]) -> None:
    caller, _ = pair
    assert caller.writer is not None
    call = asyncio.create_task(caller.call("forever"))
    caller.writer.write(HEADER.pack(3) + b"xyz")  # not a frame: the callee closes, the caller sees the end
    with pytest.raises(ChannelClosed):
        await call


def test_metrics_of_processes_are_summed() -> None:
    def process(requests: float, start: float) -> list[Any]:
        r = CollectorRegistry()
        Counter("reqs", "requests", ["route"], registry=r).labels("/a").inc(requests)
        Gauge("process_start_time_seconds", "start", registry=r).set(start)
        Gauge("python_info", "info", ["version"], registry=r).labels("3").set(1)
        return list(r.collect())

    text = render(merge([process(2, 100), process(3, 50)])).decode()
    assert 'reqs_total{route="/a"} 5.0' in text
    assert "process_start_time_seconds 50.0" in text
    assert 'python_info{version="3"} 1.0' in text
    assert text.count("# TYPE reqs_total counter") == 1


def test_the_connection_limit_is_split_across_http_processes() -> None:
    assert share(Settings(max_connections=2048), 3).max_connections == 683
    assert share(Settings(max_connections=8), 4).max_connections == 8  # the setting's floor


async def test_a_due_time_that_fails_leaves_the_others_on_time() -> None:
    from app.parallel.call_timers import EXPIRE, CallTimers

    loop = asyncio.get_running_loop()
    seen: list[int] = []

    def due(call_id: int, kind: int, value: Any) -> None:
        if call_id == 1:
            raise RuntimeError("a broken watcher")
        seen.append(call_id)

    timers = CallTimers(loop, {1, 2, 3}, due)
    handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda *_: None)  # the loop logs the failure
    try:
        now = loop.time()
        for i in (1, 2, 3):
            timers.add(now + 0.01 * i, i, EXPIRE)
        while len(seen) < 2:
            await asyncio.sleep(0.01)
    finally:
        loop.set_exception_handler(handler)
        timers.close()
    assert seen == [2, 3]

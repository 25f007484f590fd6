"""app.edge.held_head.HeldHead: an answer's head goes out with its body in one write; what must not wait (a
HEAD answer, a chunked one, a 100 Continue) goes out as it comes; a close writes what is held first."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.edge.held_head import HeldHead

pytestmark = pytest.mark.anyio


class Recording:
    """A transport that records its writes and whether it was closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def cycle(method: str = "POST", expect_100: bool = False) -> tuple[RequestResponseCycle, Recording]:
    transport = Recording()
    scope: Any = {"type": "http", "method": method, "path": "/x", "http_version": "1.1", "headers": []}
    c = RequestResponseCycle(
        scope=scope, transport=transport, flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"), access_logger=logging.getLogger("test"), access_log=False,
        default_headers=[], message_event=asyncio.Event(), expect_100_continue=expect_100, keep_alive=True,
        on_response=lambda: None,
    )  # fmt: skip
    c.transport = HeldHead(transport, c)  # type: ignore[assignment]
    return c, transport


def start(headers: list[tuple[bytes, bytes]]) -> Any:
    return {"type": "http.response.start", "status": 200, "headers": headers}


async def test_a_head_and_its_body_are_one_write() -> None:
    c, transport = cycle()
    await c.send(start([(b"content-length", b"2")]))
    assert transport.writes == []
    await c.send({"type": "http.response.body", "body": b"ok"})
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"content-length: 2\r\n\r\nok")


async def test_a_body_in_parts_follows_its_head() -> None:
    c, transport = cycle()
    await c.send(start([(b"content-length", b"4")]))
    await c.send({"type": "http.response.body", "body": b"ab", "more_body": True})
    await c.send({"type": "http.response.body", "body": b"cd"})
    assert [w[-2:] for w in transport.writes] == [b"ab", b"cd"]
    assert b"".join(transport.writes).endswith(b"\r\n\r\nabcd")


@pytest.mark.parametrize(
    ("method", "headers"),
    [("HEAD", [(b"content-length", b"2")]), ("POST", []), ("POST", [(b"content-length", b"0")])],
    ids=["HEAD", "chunked", "empty"],
)
async def test_a_head_whose_body_may_not_follow_goes_at_once(method: str, headers: Any) -> None:
    c, transport = cycle(method)
    await c.send(start(headers))
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_close_writes_the_held_head_first() -> None:
    c, transport = cycle()
    await c.send(start([(b"content-length", b"2")]))
    c.transport.close()
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.closed


async def test_100_continue_is_not_held() -> None:
    c, transport = cycle(expect_100=True)
    c.message_event.set()
    await c.receive()
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_a_close_after_the_client_left_writes_nothing() -> None:
    c, transport = cycle()
    await c.send(start([(b"content-length", b"2")]))
    transport.closed = True  # the client has gone
    c.transport.close()
    assert transport.writes == []

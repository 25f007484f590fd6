"""One write per answer: a response's head held until its body is written, then both sent at once.

uvicorn writes a response's status line and headers when the app sends http.response.start, and its body at
http.response.body: two send() calls, two TCP segments, and two wake-ups of the client, for an answer the app
sends back to back. A send on a loopback or virtual NIC costs more than the Python around it (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


class HeldHead:
    """A request cycle's transport: the head of an answer whose body must follow (a Content-Length over 0, not
    HEAD) is held and written with the body's first bytes; every other write goes through as it comes. A
    close first writes what is held (an app that failed after its head: what uvicorn would have sent)."""

    __slots__ = ("transport", "cycle", "head", "passed")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self.transport, self.cycle = transport, cycle
        self.head: bytes | None = None
        self.passed = False  # the head has been written (held or not): later writes go through

    def write(self, data: bytes) -> None:
        if self.head is not None:
            data, self.head = self.head + data, None
        elif not self.passed and self.cycle.response_started:  # this write is the head
            self.passed = True
            cycle = self.cycle  # (a HEAD answer has no body write)
            if (
                not cycle.chunked_encoding
                and cycle.expected_content_length > 0
                and cycle.scope["method"] != "HEAD"
            ):
                self.head = data
                return
        self.transport.write(data)

    def close(self) -> None:
        if self.head is not None:
            head, self.head = self.head, None
            if not self.transport.is_closing():  # (the client may have gone: uvloop raises on a closed one)
                self.transport.write(head)
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...
        return getattr(self.transport, name)

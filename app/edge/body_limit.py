"""A body over APP_MAX_BODY_BYTES: 413 (`BodyTooLarge`, with a JSON message naming the limit).

A declared Content-Length over the limit is refused by the gate before the body is read (app/edge/gate.py,
with the other refusals its one pass over the headers finds); a chunked body is counted as it streams
(`limited`, or app.edge.fastpath's own reader) and raises BodyTooLarge (an HTTPException, so FastAPI's body
parsing re-raises it as a 413 instead of its generic 400) once it passes the limit.

A route that declares FILE_UPLOAD among its dependencies (file translation) takes a body of up to
APP_MAX_FILE_BYTES plus UPLOAD_SLACK for the form around the file, instead (when that is more).
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute
from starlette.types import Message, Receive

UPLOAD_SLACK = 65_536  # an upload's form around its file: boundaries, part headers, the other fields
BODY_SETTING = "APP_MAX_BODY_BYTES"
UPLOAD_SETTING = f"APP_MAX_FILE_BYTES + {UPLOAD_SLACK} for the form"


async def _upload() -> None:
    """Marks a route whose body is a file upload; running it does nothing (the gate reads the mark)."""


FILE_UPLOAD: list[Any] = [Depends(_upload)]  # a route's `dependencies`


def takes_file(route: BaseRoute) -> bool:
    """Whether the route declares FILE_UPLOAD."""
    return isinstance(route, APIRoute) and any(d.call is _upload for d in route.dependant.dependencies)


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, size: int | None = None, setting: str = BODY_SETTING) -> None:
        got = f"a body of {size} bytes" if size is not None else "a longer body"
        message = f"request body too large: {got}, the limit is {limit} bytes ({setting})"
        super().__init__(413, message, headers={"Connection": "close"})  # the rest of the body is not read


def limited(receive: Receive, limit: int, setting: str = BODY_SETTING) -> Receive:
    """receive() that raises BodyTooLarge once more than `limit` body bytes have arrived."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit, setting=setting)
        return message

    return wrapped

"""A body over APP_MAX_BODY_BYTES: 413 (`BodyTooLarge`, with a JSON message naming the limit).

A declared Content-Length over the limit is refused by the gate before the body is read (app/edge/gate.py,
with the other refusals its one pass over the headers finds); a chunked body is counted as it streams
(`limited`, or app.edge.fastpath's own reader) and raises BodyTooLarge (an HTTPException, so FastAPI's body
parsing re-raises it as a 413 instead of its generic 400) once it passes the limit.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import Message, Receive


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, size: int | None = None) -> None:
        got = f"a body of {size} bytes" if size is not None else "a longer body"
        message = f"request body too large: {got}, the limit is {limit} bytes (APP_MAX_BODY_BYTES)"
        super().__init__(413, message, headers={"Connection": "close"})  # the rest of the body is not read


def limited(receive: Receive, limit: int) -> Receive:
    """receive() that raises BodyTooLarge once more than `limit` body bytes have arrived."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return wrapped

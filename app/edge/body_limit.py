"""Request body size limit (APP_MAX_BODY_BYTES): 413 with a JSON message naming the limit; and bodies sent in a
coding the service does not decode (415, 501), refused before they are read.

A declared Content-Length over the limit is refused before any byte is read; a chunked body is counted as it
streams and raises BodyTooLarge (an HTTPException, so FastAPI's body parsing re-raises it as a 413 instead of
its generic 400) once it passes the limit.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import Message, Receive, Scope


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, size: int | None = None) -> None:
        got = f"a body of {size} bytes" if size is not None else "a longer body"
        message = f"request body too large: {got}, the limit is {limit} bytes (APP_MAX_BODY_BYTES)"
        super().__init__(413, message, headers={"Connection": "close"})  # the rest of the body is not read


def coded_body(scope: Scope) -> HTTPException | None:
    """The refusal of a body the service cannot read as sent: a Transfer-Encoding other than chunked (RFC 9112:
    501; h11 refuses it itself, httptools hands the still-coded body on) or a Content-Encoding other than
    identity (RFC 9110: 415, with Accept-Encoding)."""
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" and _codings(value) - {"chunked"}:
            return HTTPException(
                501,
                f"Transfer-Encoding {_shown(value)} is not supported: send the body uncompressed, with "
                "Content-Length or Transfer-Encoding: chunked",
                headers={"Connection": "close"},  # the body is not read
            )
        if name == b"content-encoding" and _codings(value) - {"identity"}:
            return HTTPException(
                415,
                f"Content-Encoding {_shown(value)} is not supported: send the body uncompressed",
                headers={"Accept-Encoding": "identity", "Connection": "close"},
            )
    return None


def _codings(value: bytes) -> set[str]:
    return {c.strip().lower() for c in value.decode("latin-1").split(",") if c.strip()}


def _shown(value: bytes, limit: int = 40) -> str:
    text = value.decode("latin-1").strip()
    return text if len(text) <= limit else text[:limit] + "…"


def declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


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

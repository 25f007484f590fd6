"""What the gate refuses from a request's headers alone, before its body is read (`refusal`): more than one
Host header (400), a declared Content-Length over APP_MAX_BODY_BYTES (413, with a JSON message naming the
limit), a body in a coding the service does not decode (415, 501).

A chunked body is counted as it streams (`limited`, or app.edge.fastpath's own reader) and raises
BodyTooLarge (an HTTPException, so FastAPI's body parsing re-raises it as a 413 instead of its generic 400)
once it passes the limit.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import Message, Receive, Scope


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, size: int | None = None) -> None:
        got = f"a body of {size} bytes" if size is not None else "a longer body"
        message = f"request body too large: {got}, the limit is {limit} bytes (APP_MAX_BODY_BYTES)"
        super().__init__(413, message, headers={"Connection": "close"})  # the rest of the body is not read


def refusal(scope: Scope, limit: int) -> HTTPException | None:
    """The refusal of a request whose headers say its body cannot be read as sent, in this order (one pass
    over the headers):
    - more than one Host header: 400 (RFC 9112 section 3.2; proxies and servers that read different ones of
      the two can be made to disagree about where a request goes: request smuggling, cache poisoning);
    - a declared Content-Length over `limit`: 413;
    - a Transfer-Encoding other than chunked (RFC 9112: 501; h11 refuses it itself, httptools hands the
      still-coded body on) or a Content-Encoding other than identity (RFC 9110: 415, with Accept-Encoding).
    Each closes the connection: the body is not read."""
    hosts, lengths, size, coded = 0, 0, None, None
    for name, value in scope["headers"]:
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            lengths += 1
            size = _length(value) if lengths == 1 else size  # the first one counts
        elif coded is None and name == b"transfer-encoding" and _codings(value) - {"chunked"}:
            coded = HTTPException(
                501,
                f"Transfer-Encoding {_shown(value)} is not supported: send the body uncompressed, with "
                "Content-Length or Transfer-Encoding: chunked",
                headers={"Connection": "close"},
            )
        elif coded is None and name == b"content-encoding" and _codings(value) - {"identity"}:
            coded = HTTPException(
                415,
                f"Content-Encoding {_shown(value)} is not supported: send the body uncompressed",
                headers={"Accept-Encoding": "identity", "Connection": "close"},
            )
    if hosts > 1:
        return HTTPException(
            400, "more than one Host header: send exactly one (RFC 9112)", headers={"Connection": "close"}
        )
    if size is not None and size > limit:
        return BodyTooLarge(limit, size)
    return coded


def _length(value: bytes) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _codings(value: bytes) -> set[str]:
    return {c.strip().lower() for c in value.decode("latin-1").split(",") if c.strip()}


def _shown(value: bytes, limit: int = 40) -> str:
    text = value.decode("latin-1").strip()
    return text if len(text) <= limit else text[:limit] + "…"


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

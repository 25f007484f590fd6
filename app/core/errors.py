"""Service errors with their HTTP status, and the handlers that turn them into JSON responses."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

log = logging.getLogger(__name__)
MAX_ERRORS = 20  # validation errors listed in one 422


class ServiceError(Exception):
    """An error with an HTTP status and a short message for the client."""

    status_code = 500

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers


class NotFound(ServiceError):
    status_code = 404


UNAUTHORIZED = "missing or invalid API key: send Authorization: Bearer <key> or X-API-Key: <key>"
ADMIN_UNAUTHORIZED = "missing or invalid admin key: send Authorization: Bearer <APP_ADMIN_API_KEY>"


class Unauthorized(ServiceError):
    status_code = 401

    def __init__(self, message: str = UNAUTHORIZED) -> None:
        super().__init__(message, {"WWW-Authenticate": "Bearer"})


class Forbidden(ServiceError):
    status_code = 403


class Conflict(ServiceError):
    """Another change of the same thing is under way (a model being loaded, reloaded or unloaded)."""

    status_code = 409


class Unservable(ServiceError):
    """A model that cannot be loaded as it is on disk (its config, weights or tokenizer): what was served
    before goes on."""

    status_code = 422


class QueueFull(ServiceError):
    status_code = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)})
        self.retry_after = retry_after


class Unavailable(ServiceError):
    """Not ready yet (models loading) or shutting down."""

    status_code = 503

    def __init__(self, message: str, retry_after: int | None = 1) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)} if retry_after else None)


class DeadlineExceeded(ServiceError):
    status_code = 504

    @classmethod
    def after(cls, timeout_s: float) -> DeadlineExceeded:
        """The request's whole deadline has passed (queued, running, or building its answer)."""
        return cls(f"request timed out after {timeout_s:g} s (APP_REQUEST_TIMEOUT_S)")


class InferenceFailed(ServiceError):
    status_code = 500


class ClientDisconnected(Exception):
    """The client went away while its request was queued; nothing is sent back."""


def invalid(loc: Sequence[str | int], message: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 in FastAPI's shape for checks that need settings or a model (limits, lengths, ranges)."""
    full = ("body", *loc)
    return RequestValidationError([{"loc": full, "msg": f"{_field(full)}: {message}", "type": kind}])


def _field(loc: Sequence[Any]) -> str:
    """('body', 'texts', 3) -> 'texts[3]'."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _message(err: dict[str, Any]) -> str:
    """A message that names the field and, for limits, the limit and the value."""
    field, kind, ctx = _field(err.get("loc", ())), err.get("type", ""), err.get("ctx") or {}
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith(f"{field}:"):  # already clear (raised by the service)
        return msg
    if kind == "missing":
        return f"{field}: field required"
    if kind == "extra_forbidden":
        return f"{field}: unknown field"
    if field == "body" and kind in ("model_attributes_type", "model_type", "dict_type"):
        # a JSON array or string, or a body FastAPI did not parse as JSON (a form, text/plain): curl -d
        # without -H sends application/x-www-form-urlencoded
        return "body: must be a JSON object, sent with Content-Type: application/json"
    if kind == "json_invalid":
        where = err["loc"][-1] if err.get("loc") else "?"
        return f"body: invalid JSON at character {where} ({ctx.get('error', msg)})"
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return f"{field}: must not be empty"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    return f"{field}: {msg}"


def error_response(exc: Exception, where: str) -> Response:
    """The response to an exception raised while serving `where` ("POST /translate"): 422 in FastAPI's
    shape, a ServiceError's or HTTPException's status and message, 499 for a client that left, else 500
    (logged)."""
    if isinstance(exc, RequestValidationError):
        errors = exc.errors()
        detail = [
            {"loc": list(err.get("loc", ())), "msg": _message(err), "type": err.get("type", "value_error")}
            for err in errors[:MAX_ERRORS]
        ]
        if len(errors) > MAX_ERRORS:  # a body of 4,096 blank texts must not get a 4,096-entry answer
            more = len(errors) - MAX_ERRORS
            detail.append(
                {"loc": ["body"], "msg": f"body: and {more} more errors", "type": "too_many_errors"}
            )
        return JSONResponse({"detail": detail}, status_code=422)
    if isinstance(exc, ServiceError):
        return JSONResponse({"detail": exc.message}, status_code=exc.status_code, headers=exc.headers)
    if isinstance(exc, StarletteHTTPException):  # BodyTooLarge
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    if isinstance(exc, ClientDisconnected):
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it, metrics count it
    log.exception("unhandled error on %s", where, exc_info=exc)
    return JSONResponse({"detail": f"internal error: {type(exc).__name__}"}, status_code=500)


async def _handler(request: Request, exc: Exception) -> Response:
    return error_response(exc, f"{request.method} {request.url.path}")


async def _http_handler(request: Request, exc: Exception) -> Response:
    """FastAPI's 400 for a body its JSON parser (json.loads) cannot read says only "There was an error parsing
    the body": say why, from the parser's exception."""
    assert isinstance(exc, StarletteHTTPException)
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 400 and isinstance(exc.__cause__, ClientDisconnect):  # left before its body came
        return error_response(ClientDisconnected(), where)  # 499: nobody reads it, metrics count it
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        why = unparsable(exc.__cause__)
        return JSONResponse({"detail": f"body: cannot be parsed: {why}"}, status_code=400)
    return await http_exception_handler(request, exc)


def unparsable(cause: BaseException | None) -> str:
    """Why json.loads could not read a body that is not malformed JSON text (that is a 422)."""
    if isinstance(cause, RecursionError):  # the depth depends on the stack: about sys.getrecursionlimit()
        return (
            f"JSON nested too deeply (the parser stops near {sys.getrecursionlimit()} levels; a valid "
            "request nests 2)"
        )
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start]
        return f"not UTF-8: byte 0x{byte:02x} at position {cause.start} (send JSON text in UTF-8)"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return f"an integer of more than {sys.get_int_max_str_digits()} digits (the parser's limit)"
    return "it is not JSON text in UTF-8"


def install_error_handlers(app: FastAPI) -> None:
    for exc in (RequestValidationError, ServiceError, ClientDisconnected, Exception):
        app.add_exception_handler(exc, _handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)

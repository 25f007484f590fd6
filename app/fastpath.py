"""A lean ASGI path for the hot model routes: POST /sentiment and POST /translate.

FastAPI's per-request machinery (matching across every router, solving five dependencies, six middleware
layers, telemetry hooks) costs ~0.6 ms of event-loop time per request: at 1,000+ requests/s on 2 cores that
is the whole budget, not the model. This path answers a well-formed, authorized JSON request to a hot route
itself, with the same request schema, service call, response schema and error rendering as the FastAPI
route, and hands everything else (invalid bodies with the body replayed, missing keys, CORS requests,
other content types) to FastAPI. FastAPI stays the one source of validation messages and of the OpenAPI
schema. It matches the path below the ASGI root_path, as Starlette's router does (so also behind
`--root-path`), and does not see app.dependency_overrides or middleware added to the app: those apply to
FastAPI routes only.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.body_limit import BodyTooLarge, refuse
from app.deps import api_key_matches
from app.errors import error_response
from app.metrics import Metrics
from app.schemas import SentimentRequest, SentimentResponse, TranslateRequest, TranslateResponse
from app.service import Service
from app.settings import Settings
from app.wait import Disconnected

Call = Callable[[Service, Any, Disconnected], Awaitable[BaseModel]]
_JSON_HEADERS = [(b"content-type", b"application/json")]
_WANTED = frozenset({b"content-type", b"authorization", b"x-api-key", b"origin"})


@dataclass(frozen=True)
class HotRoute:
    request: type[BaseModel]
    response: TypeAdapter[Any]
    call: Call
    exclude_none: bool  # as the FastAPI route's response_model_exclude_none


HOT_ROUTES: dict[str, HotRoute] = {
    "/sentiment": HotRoute(
        SentimentRequest, TypeAdapter(SentimentResponse), lambda s, r, d: s.classify(r, d), False
    ),
    "/translate": HotRoute(
        TranslateRequest, TypeAdapter(TranslateResponse), lambda s, r, d: s.translate(r, d), True
    ),
}


class FastPath:
    """`accepts(scope)` picks the requests to serve here; the rest go to `fallback` (the FastAPI app)."""

    def __init__(self, service: Service, settings: Settings, metrics: Metrics, fallback: ASGIApp) -> None:
        self.service, self.settings, self.metrics, self.fallback = service, settings, metrics, fallback

    @staticmethod
    def accepts(scope: Scope) -> bool:
        return scope["type"] == "http" and scope["method"] == "POST" and route_path(scope) in HOT_ROUTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        path = route_path(scope)
        route = HOT_ROUTES[path]
        if not self._headers_qualify(scope):  # FastAPI answers (its 401, 422 or CORS headers)
            await self.fallback(scope, receive, send)
            return
        try:
            body = await _read_body(receive)
        except BodyTooLarge as exc:  # a chunked body past APP_MAX_BODY_BYTES
            self.metrics.observe_request(path, "POST", 413, time.perf_counter() - start)
            await refuse(exc, scope, receive, send)
            return
        if body is None:  # the client left before sending its body
            self.metrics.observe_request(path, "POST", 499, time.perf_counter() - start)
            return
        try:
            request = route.request.model_validate_json(body)
        except ValidationError:  # FastAPI's 422 message, from the replayed body
            await self.fallback(scope, _replay(body, receive), send)
            return
        try:
            result = await route.call(self.service, request, _disconnect_waiter(receive))
            payload = route.response.dump_json(result, exclude_none=route.exclude_none)
        except Exception as exc:  # the same rendering as the FastAPI app's exception handlers
            response = error_response(exc, f"POST {path}")
            self.metrics.observe_request(path, "POST", response.status_code, time.perf_counter() - start)
            await response(scope, receive, send)
            return
        self.metrics.observe_request(path, "POST", 200, time.perf_counter() - start)
        await send({"type": "http.response.start", "status": 200, "headers": _headers(len(payload))})
        await send({"type": "http.response.body", "body": payload})

    def _headers_qualify(self, scope: Scope) -> bool:
        """A JSON body, the API key when one is set, no CORS request."""
        seen = wanted_headers(scope)
        if self.settings.cors_origins and b"origin" in seen:
            return False
        content_type = seen.get(b"content-type", "")
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            return False
        return authorized(self.settings, seen)


def wanted_headers(scope: Scope) -> dict[bytes, str]:
    """The headers this module reads; the first of repeated headers counts (as in Starlette)."""
    seen: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _WANTED and name not in seen:
            seen[name] = value.decode("latin-1")
    return seen


def authorized(settings: Settings, headers: dict[bytes, str]) -> bool:
    """The API key check of app.deps.require_api_key on wanted_headers(scope)."""
    return api_key_matches(settings, _bearer(headers.get(b"authorization")), headers.get(b"x-api-key"))


def route_path(scope: Scope) -> str:
    """scope["path"] below scope["root_path"] (Starlette's routing rule: ASGI servers include the root path in
    the path)."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :]
    return path


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that yields the already-read body once, then the client's own messages."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _disconnect_waiter(receive: Receive) -> Callable[[], Coroutine[Any, Any, None]]:
    async def wait() -> None:  # the body is read: the next message is the disconnect
        while (await receive())["type"] != "http.disconnect":
            pass

    return wait


def _bearer(authorization: str | None) -> str | None:
    """HTTPBearer's parsing: 'Bearer <credentials>', scheme case-insensitive."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    return credentials if scheme.lower() == "bearer" and credentials else None


def _headers(length: int) -> list[tuple[bytes, bytes]]:
    return [*_JSON_HEADERS, (b"content-length", str(length).encode())]

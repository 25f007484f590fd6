"""A lean path for the POST routes whose inputs are one JSON body and dependencies that need only the request
(APP_FAST_PATH, on by default): today /sentiment, /translate and /detect; and for those whose function reads
the request itself and returns its Response (the LibreTranslate API's /translate and /detect: JSON or a form).

FastAPI's per-request machinery (matching across every router, solving each dependency, validating the
response model again) costs more CPU per request than the whole rest of a request's path: the A/B in
BENCHMARKS.md. This path is generated from the APIRoutes and runs the same code: the route's body
model validates the body, its dependencies are called as FastAPI calls them (so deps.client_disconnect is
the one disconnect watcher), the route function itself runs, and its response_model is serialized with its
response_model_exclude_none (API_KEY's dependencies, which only document the key, are not called: the gate has
checked it). app.edge.gate.Gate holds it, after the limits, the API key and the allowed hosts, inside CORS and
the metrics of every request: `prepare` resolves a request to its route function's call, which the gate
awaits and sends as JSON (so the request's frames between the gate and the route are the gate's alone). It reads the bodies itself, counting them
against APP_MAX_BODY_BYTES (BodyTooLarge: the gate answers 413), and hands FastAPI, with a counting receive,
what it does not serve: another content type, a body that does not validate (FastAPI's 422 then, from the
replayed body), everything while dependency overrides are set.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, get_type_hints

from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import ClientDisconnected
from app.edge.api_key import documents_only
from app.edge.body_limit import BodyTooLarge, limited

JSON = b"application/json"


@dataclass(frozen=True)
class LeanRoute:
    route: APIRoute
    body: str  # the route function's parameter for the request model ("": it reads the request itself)
    request: type[BaseModel] | None  # None: the function reads the request and returns its Response
    response: TypeAdapter[Any] | None
    dependencies: list[Dependant]  # those that do something (not API_KEY's)


class LeanCall(NamedTuple):
    """A lean route's function called on its request (`answer`, to await) and how its result is sent: the
    route's response model, with its response_model_exclude_none; None: the result is a Response, sent as
    it is."""

    answer: Coroutine[Any, Any, Any]
    response: TypeAdapter[Any] | None
    exclude_none: bool


def lean_routes(routes: Sequence[BaseRoute]) -> dict[str, LeanRoute]:
    """The routes this path serves, by path."""
    lean = {}
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        deps = [d for d in route.dependant.dependencies if not documents_only(d.call)]
        if (model := _lean_body(route)) is not None:
            name = route.dependant.body_params[0].name
            lean[route.path] = LeanRoute(route, name, model, TypeAdapter(route.response_model), deps)
        elif _reads_request(route):
            lean[route.path] = LeanRoute(route, "", None, None, deps)
    return lean


def _reads_request(route: APIRoute) -> bool:
    """A POST to a fixed path whose function takes the request (or nothing) and request-only dependencies,
    and is declared to return a Response (sent as it is; no response model): it reads the body itself."""
    d = route.dependant
    if route.methods != {"POST"} or route.param_convertors or route.response_model is not None:
        return False
    if d.body_params or _reads_more(d) or not inspect.iscoroutinefunction(route.endpoint):
        return False
    try:
        returns = get_type_hints(route.endpoint).get("return")
    except (NameError, TypeError):  # an annotation that does not resolve: FastAPI's way
        return False
    if not (inspect.isclass(returns) and issubclass(returns, Response)):
        return False
    return all(_request_only(sub) for sub in d.dependencies)


def _lean_body(route: APIRoute) -> type[BaseModel] | None:
    """The route's request model when this path can serve it: a POST to a fixed path, one JSON body model, a
    response model in the default JSON response, and dependencies that take the request or nothing."""
    d = route.dependant
    if route.methods != {"POST"} or route.param_convertors or route.status_code not in (None, 200):
        return None
    if route.response_model is None or not isinstance(route.response_class, DefaultPlaceholder):
        return None
    if len(d.body_params) != 1 or _reads_more(d) or not inspect.iscoroutinefunction(route.endpoint):
        return None
    if not all(_request_only(sub) for sub in d.dependencies):
        return None
    field = d.body_params[0].field_info
    model = field.annotation
    if getattr(field, "embed", False) or not (inspect.isclass(model) and issubclass(model, BaseModel)):
        return None
    return model


def _reads_more(d: Dependant) -> bool:
    """Whether `d` takes anything but a body and the request object."""
    special = (d.websocket_param_name, d.http_connection_param_name, d.response_param_name,
               d.background_tasks_param_name, d.security_scopes_param_name)  # fmt: skip
    return bool(d.path_params or d.query_params or d.header_params or d.cookie_params or any(special))


def _request_only(d: Dependant) -> bool:
    """A coroutine dependency that takes the request or nothing (no body, no sub-dependencies)."""
    call = d.call  # a function, or an instance with an async __call__ (a security scheme)
    coroutine = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)
    return coroutine and not (_reads_more(d) or d.body_params or d.dependencies)


class FastPath:
    """Held by app.edge.gate.Gate; `app`: FastAPI's (what it does not serve); `routes`: every route of the
    app; max_body_bytes: APP_MAX_BODY_BYTES."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute], max_body_bytes: int) -> None:
        self.app, self.routes, self.max_body_bytes = app, lean_routes(routes), max_body_bytes

    async def prepare(self, scope: Scope, receive: Receive, send: Send) -> LeanCall | None:
        """A lean route's call on this request (its body read and validated, its dependencies solved), for
        the gate to await and send as JSON (200); None when FastAPI has answered the request through `send`
        (another route, a body that does not validate)."""
        lean = self._lean(scope)
        if lean is None:
            await self.app(scope, limited(receive, self.max_body_bytes), send)
            return None
        if lean.request is None:  # it reads the request itself, with the body counted as FastAPI's is
            scope["route"] = lean.route
            connection = Request(scope, limited(receive, self.max_body_bytes))
            name = lean.route.dependant.request_param_name
            kwargs = await _solved(lean, connection, {name: connection} if name else {})
            return LeanCall(lean.route.endpoint(**kwargs), None, False)
        body = await _read_body(receive, self.max_body_bytes)  # BodyTooLarge: the gate answers 413
        try:
            request = lean.request.model_validate_json(body)
        except ValidationError:  # FastAPI's 422 message, from the replayed body
            await self.app(scope, _replay(body, receive), send)
            return None
        scope["route"] = lean.route  # as routing would: the gate's metric label
        kwargs = await _solved(lean, Request(scope, receive), {lean.body: request})
        return LeanCall(lean.route.endpoint(**kwargs), lean.response, lean.route.response_model_exclude_none)

    def _lean(self, scope: Scope) -> LeanRoute | None:
        """The lean route of a JSON POST to one; None while the app has dependency overrides (FastAPI applies
        them)."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        lean = self.routes.get(route_path(scope))
        if lean is None or scope["app"].dependency_overrides:
            return None
        if lean.request is None:  # (any body: the function reads it)
            return lean
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        return lean if content_type.split(b";", 1)[0].strip().lower() == JSON else None


async def _solved(lean: LeanRoute, connection: Request, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` and the route's dependencies, each called as FastAPI calls it (with the request if it takes
    it)."""
    for dep in lean.dependencies:
        value = await dep.call(**({dep.request_param_name: connection} if dep.request_param_name else {}))
        if dep.name is not None:
            kwargs[dep.name] = value
    return kwargs


def route_path(scope: Scope) -> str:
    """scope["path"] below scope["root_path"] (Starlette's rule: ASGI servers include the root path)."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return str(path[len(root) :])
    return str(path)


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole body; BodyTooLarge once more than `limit` bytes have arrived."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":  # the client left before sending its body: 499
            raise ClientDisconnected()
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
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

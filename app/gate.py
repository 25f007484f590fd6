"""The one outer layer: every HTTP request crosses it exactly once, on its way to FastAPI's routing.

From the outside in: request metrics (every answer counted and timed, labelled by route template), CORS (so
that the answers given here carry its headers too), then the checks that must come before the body is read:
a declared Content-Length over APP_MAX_BODY_BYTES is a 413 (as {"error": ...} under the LibreTranslate API's
prefix), a request for a route that declares API_KEY without the key a 401. A chunked body is counted as it
streams (BodyTooLarge once past the limit). An unexpected error becomes a JSON 500 inside CORS (Starlette's
own 500 handler runs outside every middleware: a browser page would see a network error instead).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api_key import authorized, needs_key
from app.body_limit import BodyTooLarge, declared_length, limited
from app.errors import Unauthorized, error_response
from app.metrics import Metrics
from app.settings import Settings


class Gate:
    """Added last with app.add_middleware (so outermost); `routes`: the app's, read once the routers are in."""

    def __init__(
        self, app: ASGIApp, settings: Settings, metrics: Metrics, routes: Sequence[BaseRoute]
    ) -> None:
        self.app, self.metrics, self.routes = app, metrics, list(routes)
        self.max_body_bytes = settings.max_body_bytes
        self.lt_prefix = settings.libretranslate_prefix
        self.key = settings.api_key.get_secret_value().encode() if settings.api_key is not None else None
        self.keyed = [r for r in self.routes if needs_key(r)]
        self.checked: ASGIApp = self._checked
        if settings.cors_origins:
            self.checked = CORSMiddleware(
                self._checked,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "X-API-Key", "Content-Type"],
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.checked(scope, receive, send_status)
        finally:
            self.metrics.observe_request(
                self._label(scope), scope["method"], status, time.perf_counter() - start
            )

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (size := declared_length(scope)) is not None and size > self.max_body_bytes:
            too_large = BodyTooLarge(self.max_body_bytes, size)
            if self.lt_prefix and scope["path"].startswith(self.lt_prefix + "/"):  # LibreTranslate's shape
                answer: Response = JSONResponse({"error": too_large.detail}, 413, too_large.headers)
            else:
                answer = error_response(too_large, "before routing")
            await answer(scope, receive, send)
            return
        if self.key is not None and not authorized(scope, self.key) and self._needs_key(scope):
            await error_response(Unauthorized(), "before routing")(scope, receive, send)
            return
        started = False

        async def send_started(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited(receive, self.max_body_bytes), send_started)
        except Exception as exc:
            if started:  # too late for an error answer: the server closes the connection
                raise
            await error_response(exc, f"{scope['method']} {scope['path']}")(scope, receive, send)

    def _needs_key(self, scope: Scope) -> bool:
        """Whether routing will serve this request with a route that declares API_KEY (path and method)."""
        return any(route.matches(scope)[0] is Match.FULL for route in self.keyed)

    def _label(self, scope: Scope) -> str:
        """The route template of a routed request; before or without routing the first route whose path
        matches; else "unmatched" (raw paths never become labels)."""
        if (path := getattr(scope.get("route"), "path", None)) is not None:
            return str(path)
        for route in self.routes:
            if route.matches(scope)[0] is not Match.NONE:
                return str(getattr(route, "path", "unmatched"))
        return "unmatched"

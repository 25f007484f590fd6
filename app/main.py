"""The FastAPI application: `create_app(settings)` factory; models load in the lifespan, never at import.

uvicorn app.main:app --host 127.0.0.1 --port 8000     (or: python -m app)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.body_limit import BodyTooLarge, declared_length, limited, refuse
from app.errors import CatchAll, Unauthorized, error_response, install_error_handlers
from app.fastpath import FastPath, authorized, route_path, wanted_headers
from app.metrics import Metrics, MetricsMiddleware
from app.routes import attention, demo, sentiment, system, translate
from app.service import Service
from app.settings import Settings, load_settings

DESCRIPTION = """From-scratch Transformers (sentiment, translation) with cross-request dynamic batching.

Model routes answer 503 until `/ready` is 200, 429 with `Retry-After` when a queue is full, and 504 past
`APP_REQUEST_TIMEOUT_S`. When `APP_API_KEY` is set, every route but `/health` and `/ready` needs
`Authorization: Bearer <key>` or `X-API-Key: <key>`.
"""


async def _unauthorized(scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(Unauthorized(), "before routing")(scope, receive, send)


class ServingApp(FastAPI):
    """FastAPI with app.fastpath.FastPath in front: hot model routes skip the framework's per-request
    machinery (set `fast_path = None` to serve everything through FastAPI)."""

    fast_path: FastPath | None = None
    max_body_bytes: int = 1_048_576
    metrics: Metrics | None = None
    route_paths: frozenset[str] = frozenset()  # the routes' path templates: metric labels before routing
    post_paths: frozenset[str] = frozenset()  # those with a POST route (every one needs the API key)
    settings: Settings | None = None
    cors: dict[str, Any] | None = None  # CORSMiddleware's options, when APP_CORS_ORIGINS is set

    def with_cors(self, answer: ASGIApp) -> ASGIApp:
        """`answer` (given before FastAPI's middleware runs) with CORS headers for an allowed origin: a page
        on that origin can then read the 401 or 413 instead of seeing a network error."""
        return CORSMiddleware(answer, **self.cors) if self.cors else answer

    def _may_send_body(self, scope: Scope) -> bool:
        """Every POST route needs the API key (when one is set): check it before any body byte is read or
        parsed, so that a client without the key gets 401 whatever its body (FastAPI parses the JSON before
        it runs the route's dependencies). Paths without a POST route are left to FastAPI (its 405, 404)."""
        settings = self.settings
        if settings is None or settings.api_key is None or route_path(scope) not in self.post_paths:
            return True
        return authorized(settings, wanted_headers(scope))

    def route_label(self, scope: Scope) -> str:
        """The metric label of a request before (or without) routing: its route's path, else "unmatched"."""
        path = route_path(scope)
        return path if path in self.route_paths else "unmatched"

    def _count(self, scope: Scope, status: int, start: float) -> None:
        """Count an answer given before routing, labelled as MetricsMiddleware would label it."""
        if self.metrics is not None:
            label = self.route_label(scope)
            self.metrics.observe_request(label, scope["method"], status, time.perf_counter() - start)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            start = time.perf_counter()
            if (size := declared_length(scope)) is not None and size > self.max_body_bytes:
                too_large = partial(refuse, BodyTooLarge(self.max_body_bytes, size))
                await self.with_cors(too_large)(scope, receive, send)
                self._count(scope, 413, start)
                return
            receive = limited(receive, self.max_body_bytes)
            if scope["method"] == "POST" and not self._may_send_body(scope):
                await self.with_cors(_unauthorized)(scope, receive, send)
                self._count(scope, 401, start)
                return
        if self.fast_path is not None and self.fast_path.accepts(scope):
            await self.fast_path(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(settings: Settings | None = None) -> ServingApp:
    """An app serving every checkpoint under settings.checkpoint_dir (settings default: the environment)."""
    settings = settings if settings is not None else load_settings()
    metrics = Metrics()
    service = Service(settings, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()  # fails fast on bad settings/configs; weights load in the background
        try:
            yield
        finally:
            await service.stop()  # ready -> 503, drain the queues, stop the batchers and the thread

    app = ServingApp(title="Transformer serving", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.settings, app.state.service = settings, service
    install_error_handlers(app)
    app.add_middleware(CatchAll)  # inside CORS: a 500 carries CORS headers too
    cors = {
        "allow_origins": settings.cors_origins,
        "allow_methods": ["GET", "POST"],
        "allow_headers": ["Authorization", "X-API-Key", "Content-Type"],
    }
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, **cors)  # type: ignore[arg-type]
        app.cors = cors
    app.add_middleware(MetricsMiddleware, metrics=metrics, label=lambda scope: app.route_label(scope))
    routers = (system.open_router, system.router, sentiment.router, translate.router, attention.router)
    for router in routers:
        app.include_router(router)
    demo.install(app)  # GET / and /static, public: the page is where the API key is entered
    routes = [*app.routes, *(r for router in (*routers, demo.router) for r in router.routes)]
    app.route_paths = frozenset(getattr(r, "path", "") for r in routes) - {""}
    app.post_paths = frozenset(r.path for r in routes if "POST" in (getattr(r, "methods", None) or ()))
    app.max_body_bytes, app.metrics, app.settings = settings.max_body_bytes, metrics, settings
    app.fast_path = FastPath(service, settings, metrics, fallback=super(ServingApp, app).__call__)
    return app


app = create_app()

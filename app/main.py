"""The FastAPI application: `create_app(settings)` factory; models load in the lifespan, never at import.

Served by `python -m app` only. There is no module-level `app` for `uvicorn app.main:app`: a bare uvicorn has
none of the connection limits of app/edge/connections.py (head and body deadlines, the minimum body rate, the
connection cap), which are uvicorn protocol classes that only app/__main__.py installs, so one client could
hold every descriptor. Tests and embedders call create_app().
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from starlette.routing import Mount, Route

from app import __version__
from app.api import openapi
from app.api.libretranslate import files as libretranslate_files
from app.api.libretranslate import routes as libretranslate
from app.api.routes import admin, attention, demo, detect, files, glossaries, sentiment, system, translate
from app.core.errors import install_error_handlers
from app.core.metrics import Metrics
from app.core.settings import Settings, load_settings
from app.edge.gate import Gate, GatedFastAPI
from app.serving.protocol import Serving
from app.serving.service import Service

DESCRIPTION = """From-scratch Transformers (sentiment, translation) with cross-request dynamic batching.

Model routes answer 503 until `/ready` is 200, 429 with `Retry-After` when a queue is full, and 504 past
`APP_REQUEST_TIMEOUT_S`. When `APP_API_KEY` is set, every route but `/health`, `/ready`, the API docs
(`/docs`, `/redoc`, `/openapi.json`: the schema, no data) and the demo page `/` needs `Authorization: Bearer
<key>` or `X-API-Key: <key>`. The LibreTranslate-compatible API (`/libretranslate/...`,
APP_LIBRETRANSLATE_PREFIX) also takes the key as LibreTranslate clients send it, in the body (`api_key`); its
`languages` and `frontend/settings` are open, as in LibreTranslate.
"""


def create_app(
    settings: Settings | None = None, service: Serving | None = None, extra_routers: Sequence[APIRouter] = ()
) -> FastAPI:
    """An app serving every checkpoint under settings.checkpoint_dir (settings default: the environment).
    service: the one the routes call (default: a Service of the default tasks here; app.parallel passes its
    RemoteService); extra_routers: those of tasks beyond the default ones (served as the built-in routes are)."""
    settings = settings if settings is not None else load_settings()
    service = service if service is not None else Service(settings, Metrics())
    metrics = service.metrics

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()  # fails fast on bad settings/configs; weights load in the background
        try:
            yield
        finally:
            await service.stop()  # ready -> 503, drain the queues, stop the batchers and the thread

    app = GatedFastAPI(
        title="Transformer serving",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # no 307 from /x/ to /x: Starlette builds its Location from the request's Host header
        redirect_slashes=False,
    )
    app.state.service = service
    install_error_handlers(app)
    routers = (
        system.open_router,
        system.router,
        sentiment.router,
        translate.router,
        files.router,
        glossaries.router,
        detect.router,
        attention.router,
        admin.router,
        *extra_routers,
    )
    if settings.libretranslate_prefix:  # the LibreTranslate API, e.g. /libretranslate/translate
        prefix = settings.libretranslate_prefix
        routers += (libretranslate.router(prefix), libretranslate_files.router(prefix))
    for router in routers:
        app.include_router(router)
    demo.install(app)  # GET / and /static, public: the page is where the API key is entered
    openapi.install(app, settings)  # the schema states APP_MAX_TEXTS and APP_MAX_CHARS as they are set
    # every route (newer FastAPI lists an included router in app.routes as one entry, not its routes)
    every = (*app.routes, *(r for router in (*routers, demo.router) for r in router.routes))
    routes = [r for r in every if isinstance(r, Route | Mount)]
    app.add_middleware(Gate, settings=settings, metrics=metrics, routes=routes)  # and the lean path in it
    return app

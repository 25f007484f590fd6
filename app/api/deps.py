"""Annotated dependencies: the service and the client-disconnect signal (the API key: app.edge.api_key).

All are `async def`: FastAPI runs a plain `def` dependency in the thread pool, a thread hop (and a GIL
hand-off with the inference thread) per dependency per request.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request

from app.service import Serving


async def get_service(request: Request) -> Serving:
    return request.app.state.service  # type: ignore[no-any-return]


ServiceDep = Annotated[Serving, Depends(get_service)]


async def client_disconnect(request: Request) -> Callable[[], Coroutine[Any, Any, None]]:
    """A coroutine factory that returns once the client has gone away (the body is already read)."""

    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return wait


DisconnectDep = Annotated[Callable[[], Coroutine[Any, Any, None]], Depends(client_disconnect)]

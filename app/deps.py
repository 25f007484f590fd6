"""Annotated dependencies: settings, the service, the API key check, the client-disconnect signal.

All are `async def`: FastAPI runs a plain `def` dependency in the thread pool, a thread hop (and a GIL
hand-off with the inference thread) per dependency per request.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.errors import Unauthorized
from app.service import Service
from app.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <APP_API_KEY>")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <APP_API_KEY>")


async def get_service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


ServiceDep = Annotated[Service, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def api_key_matches(settings: Settings, bearer: str | None, api_key: str | None) -> bool:
    """True when APP_API_KEY is unset or one of the given credentials is it (constant-time comparison)."""
    if settings.api_key is None:
        return True
    expected = settings.api_key.get_secret_value().encode()
    return any(hmac.compare_digest(c.encode(), expected) for c in (bearer, api_key) if c)


async def require_api_key(
    settings: SettingsDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key_header)],
) -> None:
    """401 unless APP_API_KEY is unset or the request carries it."""
    if not api_key_matches(settings, bearer.credentials if bearer else None, api_key):
        raise Unauthorized()


async def client_disconnect(request: Request) -> Callable[[], Coroutine[Any, Any, None]]:
    """A coroutine factory that returns once the client has gone away (the body is already read)."""

    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return wait


DisconnectDep = Annotated[Callable[[], Coroutine[Any, Any, None]], Depends(client_disconnect)]

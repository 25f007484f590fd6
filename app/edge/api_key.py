"""APP_API_KEY: which routes need it, and the one check of a request's credentials.

A route needs the key when it declares `API_KEY` among its dependencies. Those two dependencies only name the
two ways to send it in the OpenAPI schema (the docs' Authorize button) and do nothing when they run: the key
is checked by app.edge.gate.Gate, before the body is read, with `authorized` below.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Security
from fastapi.openapi.models import APIKey, APIKeyIn, HTTPBearer
from fastapi.openapi.models import SecurityBase as SchemeModel
from fastapi.routing import APIRoute
from fastapi.security.base import SecurityBase
from starlette.routing import BaseRoute
from starlette.types import Scope


class _Documented(SecurityBase):
    """A security scheme that appears in OpenAPI; running it checks nothing (the gate has already)."""

    def __init__(self, model: SchemeModel, scheme_name: str) -> None:
        self.model, self.scheme_name = model, scheme_name

    async def __call__(self) -> None:
        return None


_BEARER = _Documented(HTTPBearer(description="Authorization: Bearer <APP_API_KEY>"), "HTTPBearer")
_HEADER = _Documented(
    APIKey(**{"in": APIKeyIn.header}, name="X-API-Key", description="X-API-Key: <APP_API_KEY>"),
    "APIKeyHeader",
)
API_KEY: list[Any] = [Security(_BEARER), Security(_HEADER)]  # a router's or route's `dependencies`
ADMIN_PREFIX = "/admin/"  # the admin API's paths: APP_ADMIN_API_KEY alone opens them (app.edge.gate.Gate)
_ADMIN_BEARER = _Documented(
    HTTPBearer(description="Authorization: Bearer <APP_ADMIN_API_KEY>"), "AdminBearer"
)
ADMIN_KEY: list[Any] = [Security(_ADMIN_BEARER)]


def documents_only(call: Any) -> bool:
    """Whether a dependency is one of API_KEY's or ADMIN_KEY's (it checks nothing: app.edge.fastpath need
    not call it)."""
    return isinstance(call, _Documented)


def needs_key(route: BaseRoute) -> bool:
    """Whether the route declares API_KEY."""
    return isinstance(route, APIRoute) and any(d.call is _BEARER for d in route.dependant.dependencies)


def authorized(scope: Scope, key: bytes) -> bool:
    """Whether the request sends `key` as `Authorization: Bearer <key>` or as `X-API-Key: <key>`, read as RFC
    9110 reads credentials: the scheme in any case, then one or more spaces (1*SP), then the key; a value's
    surrounding whitespace is not part of it (h11 strips it, httptools keeps the trailing part). Of a repeated
    header the first counts, as Starlette reads headers. Constant-time."""
    first: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in (b"authorization", b"x-api-key"):
            first.setdefault(name, value.strip(b" \t"))
    scheme, _, bearer = first.get(b"authorization", b"").partition(b" ")
    sent = [bearer.lstrip(b" ") if scheme.lower() == b"bearer" else b"", first.get(b"x-api-key", b"")]
    return any(hmac.compare_digest(c, key) for c in sent if c)


def matches(sent: str | None, key: bytes) -> bool:
    """Whether a key sent in a request body (the LibreTranslate API's `api_key`) is `key`. Constant-time."""
    return bool(sent) and hmac.compare_digest(str(sent).encode(), key)

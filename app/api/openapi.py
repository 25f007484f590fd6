"""The OpenAPI documents state the limits the server applies with the running app's settings: a field marked
LIMITED in app/schemas.py (e.g. {"maxItems": "max_texts"}) gets the setting's value ("maxItems": 64), and the
mark names the variable that sets it ({"maxItems": "APP_MAX_TEXTS"}). A client, or a schema-driven fuzzer
(tests/app/test_schema_contract.py), reads the limits the server answers 422 or 400 past."""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI

from app.core.settings import ENV_PREFIX, Settings
from app.schemas import LIMITED


def with_limits(document: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A copy of `document` with every LIMITED mark's keywords set from `settings`."""
    document = copy.deepcopy(document)  # the marks may be shared with the routes' own openapi_extra
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(limits := node.get(LIMITED), dict):
                node |= {keyword: getattr(settings, name) for keyword, name in limits.items()}
                node[LIMITED] = {keyword: ENV_PREFIX + name.upper() for keyword, name in limits.items()}
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return document


def install(app: FastAPI, settings: Settings) -> None:
    """app.openapi() (GET /openapi.json, /docs) builds the document once, with the limits of `settings`."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_limits(build(), settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

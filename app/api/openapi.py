"""The OpenAPI documents state the limits the server applies with the running app's settings: a field marked
LIMITED in app/schemas.py (e.g. {"maxItems": "max_texts"}) gets the setting's value ("maxItems": 64), and the
mark names the variable that sets it ({"maxItems": "APP_MAX_TEXTS"}). A client, or a schema-driven fuzzer
(tests/app/test_schema_contract.py), reads the limits the server answers 422 or 400 past.

The LibreTranslate API's `source` and `target` state the codes the server accepts, once the models are
known: a pattern of the served codes in any case (and "auto" for the source), as its 400 "zz is not
supported" answers every other."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI

from app.core.settings import ENV_PREFIX, Settings
from app.schemas import LIMITED
from app.tasks.translation_routes import translation_routes


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


def any_case(codes: Iterable[str]) -> str:
    """A JSON Schema pattern (ECMA 262, no flags) matching exactly these codes in any case, with the
    surrounding whitespace the server strips: {"fr", "en"} -> ^\\s*([eE][nN]|[fF][rR])\\s*$."""

    def letters(code: str) -> str:
        return "".join(
            f"[{c.lower()}{c.upper()}]" if c.isalpha() else c if c in "-_" else re.escape(c) for c in code
        )

    return r"^\s*(" + "|".join(letters(c) for c in sorted(set(codes))) + r")\s*$"


def with_languages(document: dict[str, Any], prefix: str, pairs: Iterable[tuple[str, str]]) -> None:
    """Set the LibreTranslate translate body's source and target patterns to the served codes."""
    served = {lang for pair in pairs for lang in pair}  # as the route's check: a pair then may still be 400
    operation = document["paths"].get(f"{prefix}/translate", {}).get("post")
    if operation is None or not served:
        return
    for media in operation["requestBody"]["content"].values():
        fields = media["schema"]["properties"]
        codes = ", ".join(sorted(served))
        fields["source"]["pattern"] = any_case(served | {"auto"})
        fields["target"]["pattern"] = any_case(served)
        fields["source"]["description"] = f'One of {codes} (any case), or "auto" to detect it.'
        fields["target"]["description"] = f"One of {codes} (any case)."


def install(app: FastAPI, settings: Settings) -> None:
    """app.openapi() (GET /openapi.json, /docs) builds the document once, with the limits of `settings`,
    and the LibreTranslate language codes once the models are known (until then it is built anew)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = with_limits(build(), settings)
            service = getattr(app.state, "service", None)
            registry = getattr(service, "registry", None)
            if registry is None and settings.libretranslate_prefix:
                return document  # the models are not known yet: no codes to state, and nothing cached
            if settings.libretranslate_prefix:
                pairs = translation_routes(settings, registry).pairs
                with_languages(document, settings.libretranslate_prefix, pairs)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

"""The LibreTranslate API under APP_LIBRETRANSLATE_PREFIX: POST translate and detect, GET languages,
frontend/settings, health and spec (suggest answers 403, as LibreTranslate with it off; not in the OpenAPI
documents, as it takes no request; translate_file and download_file: app/api/libretranslate/files.py).
Bodies are JSON or forms (urlencoded or multipart), with the API key in the body or in the headers; every
error is {"error": message}. The mapping onto the service: app/api/libretranslate/mapping.py.

The key is checked here, not by the gate: it may be in the body. languages, frontend/settings, health and spec
are open, as in LibreTranslate (clients read them to learn whether a key is needed).
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app import __version__
from app.api.deps import DisconnectDep, ServiceDep
from app.api.libretranslate import mapping as lt
from app.api.openapi import with_limits
from app.core.errors import ClientDisconnected, ServiceError, unparsable
from app.core.settings import Settings
from app.edge.api_key import authorized, matches

log = logging.getLogger(__name__)
KEY_FIELDS = (b"api_key", b"apiKey")  # apiKey: as the npm `libretranslate` client sends it
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class LtErrorBody(BaseModel):
    error: str


def _doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI: the body's fields, as JSON or as a form (where each q is a non-empty text: a list of one
    empty q is sent as one empty field, which is a missing q; a glossary is its JSON text)."""
    schema = model.model_json_schema()
    form = copy.deepcopy(schema)
    for branch in form["properties"]["q"]["anyOf"]:
        if branch.get("type") == "array":
            branch["items"]["minLength"] = 1
    if glossary := form["properties"].get("glossary"):
        object_schema = next(b for b in glossary.pop("anyOf") if b.get("type") == "object")
        glossary |= {"type": "string", "contentMediaType": "application/json", "contentSchema": object_schema}
    content = {"application/json": {"schema": schema}} | {m: {"schema": form} for m in FORMS}
    return {"requestBody": {"required": True, "content": content}}


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": LtErrorBody, "description": why}
    for code, why in {
        400: "Invalid request (a missing or invalid field, a limit, an unsupported language)",
        403: "APP_API_KEY is set and the request lacks it (api_key, or the Authorization/X-API-Key header)",
        413: "The body is larger than APP_MAX_BODY_BYTES",
        429: "Queue full: retry after the Retry-After header's seconds",
        503: "Models still loading, or shutting down",
    }.items()
}


def router(prefix: str) -> APIRouter:
    """The routes under `prefix` (e.g. /libretranslate)."""
    r = APIRouter(prefix=prefix, tags=["LibreTranslate"])

    @r.post("/translate", openapi_extra=_doc(lt.TranslateParams), responses=ERRORS)
    async def translate(request: Request, service: ServiceDep, disconnected: DisconnectDep) -> JSONResponse:
        """Translate q (a text or a list) from source (a code or "auto") to target; format text or html."""

        async def work() -> Any:
            params = lt.parse(lt.TranslateParams, await _fields(request, service.settings))
            return await lt.translate(service, params, disconnected)

        return await _answer(work)

    @r.post("/detect", openapi_extra=_doc(lt.DetectParams), responses=ERRORS)
    async def detect(request: Request, service: ServiceDep) -> JSONResponse:
        """The languages of q, best first: [{"language", "confidence" (0-100)}]."""

        async def work() -> Any:
            params = lt.parse(lt.DetectParams, await _fields(request, service.settings))
            return await lt.detect(service, params)

        return await _answer(work)

    @r.get("/languages", responses={503: ERRORS[503]})
    async def languages(service: ServiceDep) -> JSONResponse:
        """Every language of a served pair: [{"code", "name", "targets"}]."""
        return await _answer(lambda: lt.languages(service))

    @r.get("/frontend/settings", responses={503: ERRORS[503]})
    async def frontend_settings(service: ServiceDep) -> JSONResponse:
        """Limits (charLimit, batchLimit), whether a key is required, default languages."""
        return await _answer(lambda: lt.frontend_settings(service))

    @r.get("/health")
    async def health() -> JSONResponse:
        """Liveness, as LibreTranslate's (its healthcheck script and clients' health() read it)."""
        return JSONResponse({"status": "ok"})

    @r.get("/spec")
    async def spec(service: ServiceDep) -> JSONResponse:
        """This API's OpenAPI document (LibreTranslate serves its Swagger document here)."""
        document = get_openapi(title="LibreTranslate", version=__version__, routes=r.routes)
        return JSONResponse(with_limits(document, service.settings))

    # what LibreTranslate answers with suggestions off (frontend/settings says so): out of the OpenAPI
    # documents, which would call some request valid (every one is refused)
    @r.post("/suggest", include_in_schema=False)
    async def suggest() -> JSONResponse:
        """Not served: 403, as LibreTranslate without --suggestions."""
        return _error(lt.LtError(403, "Suggestions are disabled on this server."))

    return r


async def _fields(request: Request, settings: Settings) -> dict[str, Any]:
    """The body's fields (JSON object or form; query parameters fill in what it lacks), the key checked
    first: a key in the headers before the body is read; else a body that cannot be read, or a JSON body
    without the text `api_key`, has no key in it, so without one elsewhere that is the answer."""
    fields = _multi(request.query_params.multi_items())
    settled = _header_key(request, fields, settings)  # 403 here for a wrong key in the headers
    try:
        fields |= await _body_fields(request, None if settled else settings)
    except ClientDisconnect:
        raise ClientDisconnected() from None
    except (lt.LtError, StarletteHTTPException):  # not JSON, a bad form, a body past APP_MAX_BODY_BYTES
        if not settled:
            _check_key(request, fields, settings)
        raise
    if not settled:
        _check_key(request, fields, settings)
    return fields


def _sent_key(fields: dict[str, Any]) -> Any:
    """The key a body or query carries: api_key, or apiKey as the npm `libretranslate` client sends it."""
    return fields.get("api_key", fields.get("apiKey"))


def _header_key(request: Request, fields: dict[str, Any], settings: Settings) -> bool:
    """Whether the key is settled before the body is read: none is needed, or the headers (or the query's
    api_key) carry it; a wrong key in the headers is a 403 at once (the body is never read)."""
    if settings.api_key is None:
        return True
    key = settings.api_key.get_secret_value().encode()
    sent = _sent_key(fields)
    if authorized(request.scope, key) or matches(sent if isinstance(sent, str) else None, key):
        return True
    if any(name in (b"authorization", b"x-api-key") for name, _ in request.scope["headers"]):
        raise lt.LtError(403, "Invalid API key")
    return False


async def _body_fields(request: Request, keyed: Settings | None) -> dict[str, Any]:
    """The fields of the body; `keyed`: the key is still to be found (a JSON body without `api_key` or
    `apiKey` in its text cannot hold it: 403 without parsing it; `\\u` escapes could spell it, so those
    are parsed)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        body = await request.body()
        if keyed is not None and not any(name in body for name in KEY_FIELDS) and b"\\u" not in body:
            _check_key(request, {}, keyed)
        try:
            data = json.loads(body)
        except RecursionError as e:  # the parser's depth limit (about sys.getrecursionlimit()): a clean 400
            raise lt.LtError(400, f"Invalid request: the body is not JSON ({unparsable(e)})") from None
        except ValueError as e:
            raise lt.LtError(400, f"Invalid request: the body is not JSON ({e})") from None
        if not isinstance(data, dict):
            raise lt.LtError(400, "Invalid JSON format")  # LibreTranslate's words: an object is expected
        return data
    if kind in FORMS:
        async with request.form() as form:
            items = list(form.multi_items())
        if files := [k for k, v in items if isinstance(v, UploadFile)]:
            raise lt.LtError(400, f"Invalid request: {files[0]} is a file: send text")
        return _multi(items)
    if await request.body():
        raise lt.LtError(
            400,
            f"Invalid request: send the fields as JSON (application/json) or as a form "
            f"({' or '.join(FORMS)}), not {kind or 'a body without Content-Type'}",
        )
    return {}


def _multi(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """Form fields: a repeated field (q=a&q=b) is a list."""
    out: dict[str, Any] = {}
    for key, value in items:
        if key in out:
            out[key] = [*out[key], value] if isinstance(out[key], list) else [out[key], value]
        else:
            out[key] = value
    return out


def _check_key(request: Request, fields: dict[str, Any], settings: Settings) -> None:
    """With APP_API_KEY set: the key in the body (api_key) or the headers, else 403 as LibreTranslate."""
    if settings.api_key is None:
        return
    key = settings.api_key.get_secret_value().encode()
    sent = _sent_key(fields)
    if authorized(request.scope, key) or matches(sent if isinstance(sent, str) else None, key):
        return
    if sent:
        raise lt.LtError(403, "Invalid API key")
    raise lt.LtError(403, "Invalid API key: this server needs one (api_key, or Authorization: Bearer <key>)")


async def _answer(work: Callable[[], Any]) -> JSONResponse:
    """work()'s result (awaited if need be) as JSON, or its error as {"error": message}; a client that left
    gets nothing (499)."""
    try:
        result = work()
        return JSONResponse(await result if inspect.isawaitable(result) else result)
    except lt.LtError as e:
        err = e
    except ServiceError as e:  # 429, 503, 504, 500
        err = lt.error_of(e)
    except StarletteHTTPException as e:  # a body past APP_MAX_BODY_BYTES, a form that cannot be parsed
        err = lt.LtError(e.status_code, str(e.detail), e.headers)
    except RequestValidationError as e:
        err = lt.LtError(400, f"Invalid request: {e.errors()[0].get('msg', 'invalid value')}")
    except ClientDisconnected:
        raise
    except Exception as e:
        log.exception("unhandled error in the LibreTranslate API")
        err = lt.LtError(500, f"internal error: {type(e).__name__}")
    return _error(err)


def _error(err: lt.LtError) -> JSONResponse:
    return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)

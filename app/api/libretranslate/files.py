"""LibreTranslate's file routes: POST translate_file (multipart: file, source, target, api_key; and ours:
glossary as JSON text, glossary_id) answers
{"translatedFileUrl": <base>/download_file/<name>}; GET download_file/<name> answers the translated file, for
APP_FILE_TTL_S, to the key that asked (app/files/storage.py). Errors in LibreTranslate's shape and words
({"error": message}; 400 for bad input, a limit such as APP_MAX_WORK included, as its /translate), plus 413
for a file over APP_MAX_FILE_BYTES and 404 for a name that is not there (expired, another key's)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.datastructures import UploadFile

from app.api.deps import DisconnectDep, ServiceDep
from app.api.libretranslate import mapping as lt
from app.api.libretranslate.routes import ERRORS, LtErrorBody, _answer, _check_key, _error, _multi
from app.edge.body_limit import FILE_UPLOAD
from app.files.document import UnreadableFile
from app.files.formats import FORMATS, format_of
from app.files.storage import FileStore, safe_name, well_formed
from app.files.translate import translate_file
from app.files.upload import FileTooLarge, attachment, read_upload
from app.glossaries.schemas import form_terms

DOWNLOAD = "libretranslate_download_file"  # the route's name, for its URL
FORM = {
    "type": "object",
    "required": ["file", "source", "target"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": f"One of {', '.join(FORMATS)}"},
        "source": {"type": "string", "minLength": 1, "description": 'A code, or "auto"'},
        "target": {"type": "string", "minLength": 1},
        "api_key": {"type": "string", "description": "Or Authorization: Bearer / X-API-Key"},
        "glossary": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": 'Not LibreTranslate\'s: {"source term": "target term"} as JSON text',
        },
        "glossary_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 100,
            "description": "Not LibreTranslate's: a stored glossary (POST /glossaries) instead",
        },
    },
}
FILE_TYPES = {f.media_type: {"schema": {"type": "string", "format": "binary"}} for f in FORMATS.values()}


class TranslatedFile(BaseModel):
    translatedFileUrl: str  # noqa: N815 (LibreTranslate's name)


def router(prefix: str) -> APIRouter:
    """The routes under `prefix` (e.g. /libretranslate), beside app/api/libretranslate/routes.py's."""
    r = APIRouter(prefix=prefix, tags=["LibreTranslate"])

    @r.post(
        "/translate_file",
        dependencies=FILE_UPLOAD,
        openapi_extra={
            "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": FORM}}}
        },
        response_model=TranslatedFile,
        responses={
            **ERRORS,
            413: {**ERRORS[413], "description": "The file is larger than APP_MAX_FILE_BYTES"},
        },
    )
    async def translate_file_route(
        request: Request, service: ServiceDep, disconnected: DisconnectDep
    ) -> JSONResponse:
        """Translate a file (multipart: file, source, target); the answer names where to download it."""

        async def work() -> Any:
            settings = service.settings
            async with request.form(max_files=1) as form:
                fields = _multi(list(request.query_params.multi_items())) | _multi(list(form.multi_items()))
                _check_key(request, fields, settings)
                upload, source, target = (fields.get(k) for k in ("file", "source", "target"))
                for name, value in (("file", upload), ("source", source), ("target", target)):
                    if not value:
                        raise lt.LtError(400, f"Invalid request: missing {name} parameter")
                if (
                    not isinstance(upload, UploadFile)
                    or not isinstance(source, str)
                    or not isinstance(target, str)
                ):
                    raise lt.LtError(400, "Invalid request: file must be a file, source and target texts")
                if not upload.filename:
                    raise lt.LtError(400, "Invalid request: empty file")
                if (fmt := format_of(upload.filename)) is None:
                    raise lt.LtError(400, "Invalid request: file format not supported")
                source, target = source.strip().lower(), target.strip().lower()
                terms, glossary_id = _glossary(fields)
                lt._check_languages(service, source, target)  # LibreTranslate's 400s, as /translate's
                try:
                    data = await read_upload(upload, settings.max_file_bytes)
                except FileTooLarge as e:
                    raise lt.LtError(413, f"Invalid request: {e}") from None
            try:
                out = await translate_file(
                    service, fmt, data, source, target, disconnected, terms, glossary_id
                )
            except UnreadableFile as e:
                raise lt.LtError(400, f"Invalid request: the file is {e}") from None
            key = settings.api_key.get_secret_value() if settings.api_key is not None else None
            store = FileStore(settings.file_dir, settings.file_ttl_s)
            name = await asyncio.to_thread(store.put, out, safe_name(upload.filename, fmt.extension), key)
            return {"translatedFileUrl": str(request.url_for(DOWNLOAD, name=name))}

        return await _answer(work)

    @r.get(
        "/download_file/{name}",
        name=DOWNLOAD,
        response_class=Response,
        responses={
            200: {"description": "The translated file", "content": FILE_TYPES},
            400: {**ERRORS[400], "description": "Not a name translate_file makes"},
            403: ERRORS[403],
            404: {"model": LtErrorBody, "description": "No such file for this key, or expired"},
        },
    )
    async def download_file(name: str, request: Request, service: ServiceDep) -> Response:
        """A translated file (translate_file's translatedFileUrl), for APP_FILE_TTL_S after it was made."""
        settings = service.settings
        try:
            _check_key(request, _multi(list(request.query_params.multi_items())), settings)
        except lt.LtError as e:
            return _error(e)
        if not well_formed(name):  # e.g. "..": LibreTranslate's answer
            return _error(lt.LtError(400, "Invalid filename"))
        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        found = await asyncio.to_thread(FileStore(settings.file_dir, settings.file_ttl_s).get, name, key)
        if found is None:
            return _error(lt.LtError(404, "File not found: it has expired, or was never made for this key"))
        data, filename = found
        fmt = format_of(filename)
        media_type = fmt.media_type if fmt is not None else "application/octet-stream"
        return Response(data, media_type=media_type, headers=attachment(filename))

    return r


def _glossary(fields: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The form's glossary (JSON text) and glossary_id, in LibreTranslate's 400s."""
    glossary, glossary_id = fields.get("glossary"), fields.get("glossary_id") or None
    if not isinstance(glossary, str | None) or not isinstance(glossary_id, str | None):
        raise lt.LtError(400, "Invalid request: glossary and glossary_id must be texts")
    try:
        return form_terms(glossary), glossary_id
    except ValueError as e:
        raise lt.LtError(400, f"Invalid request: glossary: {e}") from None

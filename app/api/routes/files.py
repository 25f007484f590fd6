"""POST /translate/file: a file (multipart: file, source_lang, target_lang; glossary or glossary_id) answered
translated, in the same format, as a download (app/files/)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, UploadFile
from fastapi.responses import Response

from app.api.deps import DisconnectDep, ServiceDep
from app.api.routes.common import ERRORS
from app.core.errors import invalid
from app.edge.api_key import API_KEY
from app.edge.body_limit import FILE_UPLOAD
from app.files.document import UnreadableFile
from app.files.formats import FORMATS, format_of
from app.files.storage import safe_name
from app.files.translate import translate_file
from app.files.upload import FileTooLarge, attachment, read_upload
from app.glossaries.schemas import form_terms

router = APIRouter(tags=["translation"], dependencies=[*API_KEY, *FILE_UPLOAD])
FILE_TYPES = {f.media_type: {"schema": {"type": "string", "format": "binary"}} for f in FORMATS.values()}
GLOSSARY = '{"source term": "target term"} as JSON text, as /translate\'s glossary'
GLOSSARY_ID = (
    "A stored glossary (POST /glossaries) instead: its source_lang must be the file's (given or detected)"
)
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The translated file, named as the upload", "content": FILE_TYPES},
    **ERRORS,
    400: {**ERRORS[400], "description": "The file is not of the format its name says (e.g. not UTF-8 text)"},
    413: {**ERRORS[413], "description": "The file is larger than APP_MAX_FILE_BYTES"},
    415: {**ERRORS[415], "description": f"A file name not ending in one of {', '.join(FORMATS)}"},
}


@router.post("/translate/file", response_class=Response, responses=RESPONSES)
async def translate_file_route(
    file: Annotated[UploadFile, File(description=f"A file: {', '.join(FORMATS)}")],
    source_lang: Annotated[str, Form(min_length=1, description='A code, or "auto"')],
    target_lang: Annotated[str, Form(min_length=1)],
    service: ServiceDep,
    disconnected: DisconnectDep,
    glossary: Annotated[str | None, Form(description=GLOSSARY)] = None,
    glossary_id: Annotated[str | None, Form(min_length=1, max_length=100, description=GLOSSARY_ID)] = None,
) -> Response:
    """Translate a file; everything that is not text (styles, runs, tables, timings, markup) is kept. Its
    texts go in one translation request: 422 past APP_MAX_WORK."""
    if (fmt := format_of(file.filename or "")) is None:
        raise HTTPException(415, f"unsupported file format: send one of {', '.join(FORMATS)}")
    try:
        terms = form_terms(glossary)
    except ValueError as e:
        raise invalid(("glossary",), str(e)) from None
    try:
        data = await read_upload(file, service.settings.max_file_bytes)
        out = await translate_file(
            service, fmt, data, source_lang, target_lang, disconnected, terms, glossary_id
        )
    except FileTooLarge as e:
        raise HTTPException(413, str(e)) from None
    except UnreadableFile as e:
        raise HTTPException(400, f"the file is {e}") from None
    name = safe_name(file.filename or "", fmt.extension)
    return Response(out, media_type=fmt.media_type, headers=attachment(name))

"""/glossaries: glossaries stored by id (as DeepL's), used by `glossary_id` on /translate, the file routes and
the LibreTranslate API (app/glossaries/store.py: JSON files in APP_GLOSSARY_DIR, each seen by its API key)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

from app.api.deps import ServiceDep
from app.api.routes.common import ERRORS, ErrorBody
from app.core.limits import Limits
from app.edge.api_key import API_KEY
from app.glossaries.schemas import GlossaryCreate, GlossaryEntries, GlossaryInfo, GlossaryList
from app.glossaries.store import GlossaryStore, StoredGlossary, StoreFull
from app.serving.protocol import Serving

router = APIRouter(prefix="/glossaries", tags=["glossaries"], dependencies=API_KEY)
COMMON: dict[int | str, dict[str, Any]] = {k: ERRORS[k] for k in (400, 401, 413, 415)}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    **COMMON,
    404: {"model": ErrorBody, "description": "No glossary of this id for this API key"},
}


@router.post(
    "",
    status_code=201,
    response_model=GlossaryInfo,
    responses={**COMMON, 409: {"model": ErrorBody, "description": "The store holds APP_MAX_GLOSSARIES"}},
)
async def create_glossary(body: GlossaryCreate, service: ServiceDep) -> dict[str, Any]:
    """Store a glossary; its `glossary_id` goes in /translate's (or a file's) `glossary_id`."""
    Limits(service.settings).check_glossary(body.entries, "entries")
    store = GlossaryStore.of(service.settings)
    try:
        g = await asyncio.to_thread(store.create, body.name, body.source_lang, body.target_lang, body.entries)
    except StoreFull as e:
        raise HTTPException(409, str(e)) from None
    return g.info()


@router.get("", response_model=GlossaryList, responses=COMMON)
async def list_glossaries(service: ServiceDep) -> dict[str, Any]:
    """This API key's glossaries (every one without APP_API_KEY), oldest first."""
    found = await asyncio.to_thread(GlossaryStore.of(service.settings).owned)
    return {"glossaries": [g.info() for g in found]}


@router.get("/{glossary_id}", response_model=GlossaryInfo, responses=NOT_FOUND)
async def get_glossary(glossary_id: str, service: ServiceDep) -> dict[str, Any]:
    """A glossary's metadata."""
    return (await _found(service, glossary_id)).info()


@router.get("/{glossary_id}/entries", response_model=GlossaryEntries, responses=NOT_FOUND)
async def glossary_entries(glossary_id: str, service: ServiceDep) -> dict[str, Any]:
    """A glossary's entries: {"entries": {"source term": "target term"}}."""
    return {"entries": (await _found(service, glossary_id)).entries}


@router.delete("/{glossary_id}", status_code=204, response_class=Response, responses=NOT_FOUND)
async def delete_glossary(glossary_id: str, service: ServiceDep) -> Response:
    """Delete a glossary (a request naming it afterwards: 404)."""
    if not await asyncio.to_thread(GlossaryStore.of(service.settings).delete, glossary_id):
        raise _not_found(glossary_id)
    return Response(status_code=204)


async def _found(service: Serving, glossary_id: str) -> StoredGlossary:
    if (g := await asyncio.to_thread(GlossaryStore.of(service.settings).get, glossary_id)) is None:
        raise _not_found(glossary_id)
    return g


def _not_found(glossary_id: str) -> HTTPException:
    return HTTPException(404, f"no glossary {glossary_id[:50]!r} (for this API key)")

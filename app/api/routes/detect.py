"""POST /detect."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ServiceDep
from app.api.routes.common import ERRORS
from app.core.errors import invalid
from app.edge.api_key import API_KEY
from app.schemas import DetectedLanguage, DetectRequest, DetectResponse, DetectResult
from app.text.langid import Detection

router = APIRouter(tags=["language"], dependencies=API_KEY)


@router.post("/detect", response_model=DetectResponse, response_model_exclude_none=True, responses=ERRORS)
async def detect(body: DetectRequest, service: ServiceDep) -> DetectResponse:
    """Each text's language among the served ones (translator sources, sentiment languages)."""
    found = await service.detect(body.items, body.field)
    served = service.detector.languages if service.detector else frozenset()
    return DetectResponse(results=[_result(body, i, f, served) for i, f in enumerate(found)])


def _result(body: DetectRequest, i: int, found: list[Detection], served: frozenset[str]) -> DetectResult:
    """The best detection, and every served one when asked; 422 for a text without letters."""
    if not found:
        loc = (body.field,) if body.field == "text" else (body.field, i)
        raise invalid(loc, "no letters in this text: there is no language to detect")
    candidates = [
        DetectedLanguage(language=d.language, confidence=d.confidence) for d in found if d.language in served
    ]
    best = found[0]
    return DetectResult(
        language=best.language, confidence=best.confidence, candidates=candidates if body.candidates else None
    )

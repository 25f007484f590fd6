"""POST /detect."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ServiceDep
from app.api.routes.common import ERRORS
from app.edge.api_key import API_KEY
from app.schemas import UNDETERMINED, DetectedLanguage, DetectRequest, DetectResponse, DetectResult
from app.text.langid import Detection

router = APIRouter(tags=["language"], dependencies=API_KEY)


@router.post("/detect", response_model=DetectResponse, response_model_exclude_none=True, responses=ERRORS)
async def detect(body: DetectRequest, service: ServiceDep) -> DetectResponse:
    """Each text's language among the served ones (translator sources, sentiment languages)."""
    found = await service.detect(*body.inputs)
    served = service.detector.languages if service.detector else frozenset()
    return DetectResponse(results=[_result(body, f, served) for f in found])


def _result(body: DetectRequest, found: list[Detection], served: frozenset[str]) -> DetectResult:
    """The best detection, and every served one when asked; "und" (undetermined) with confidence 0 for a
    text without letters (digits, emoji, punctuation: /translate passes such a text through)."""
    if not found:
        return DetectResult(language=UNDETERMINED, confidence=0.0, candidates=[] if body.candidates else None)
    candidates = [
        DetectedLanguage(language=d.language, confidence=d.confidence) for d in found if d.language in served
    ]
    best = found[0]
    return DetectResult(
        language=best.language, confidence=best.confidence, candidates=candidates if body.candidates else None
    )

"""POST /detect."""

from __future__ import annotations

from fastapi import APIRouter

from app.api_key import API_KEY
from app.deps import ServiceDep
from app.routes.common import ERRORS
from app.schemas import DetectRequest, DetectResponse

router = APIRouter(tags=["language"], dependencies=API_KEY)


@router.post("/detect", response_model=DetectResponse, response_model_exclude_none=True, responses=ERRORS)
async def detect(body: DetectRequest, service: ServiceDep) -> DetectResponse:
    """Each text's language among the served ones (translator sources, sentiment languages)."""
    return await service.detect_response(body)

"""POST /sentiment."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.deps import DisconnectDep, ServiceDep, require_api_key
from app.routes.common import ERRORS
from app.schemas import SentimentRequest, SentimentResponse

router = APIRouter(tags=["sentiment"], dependencies=[Depends(require_api_key)])


@router.post("/sentiment", response_model=SentimentResponse, responses=ERRORS)
async def sentiment(
    body: SentimentRequest, service: ServiceDep, disconnected: DisconnectDep
) -> SentimentResponse:
    """Classify one text or a list; each text is routed by language unless `model` is given."""
    return await service.classify(body, disconnected)

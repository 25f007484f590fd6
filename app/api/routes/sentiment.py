"""POST /sentiment."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AnswerDep
from app.api.routes.common import ERRORS
from app.edge.api_key import API_KEY
from app.schemas import SentimentRequest, SentimentResponse
from app.tasks.sentiment import SentimentTask

router = APIRouter(tags=["sentiment"], dependencies=API_KEY)


@router.post("/sentiment", response_model=SentimentResponse, responses=ERRORS)
async def sentiment(body: SentimentRequest, answer: AnswerDep) -> SentimentResponse:
    """Classify one text or a list; each text is routed by language unless `model` is given."""
    return await answer(SentimentTask.name, body)  # type: ignore[no-any-return]

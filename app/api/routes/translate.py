"""POST /translate."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AnswerDep
from app.api.routes.common import ERRORS
from app.edge.api_key import API_KEY
from app.schemas import TranslateRequest, TranslateResponse
from app.tasks.translation import TranslationTask

router = APIRouter(tags=["translation"], dependencies=API_KEY)


@router.post(
    "/translate", response_model=TranslateResponse, response_model_exclude_none=True, responses=ERRORS
)
async def translate(body: TranslateRequest, answer: AnswerDep) -> TranslateResponse:
    """Translate texts (split into sentences, batched across requests) with greedy or beam search."""
    return await answer(TranslationTask.name, body)  # type: ignore[no-any-return]

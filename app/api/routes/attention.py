"""POST /attention: every attention map of one forward pass, as JSON or a PNG heatmap grid."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from app.api.deps import AnswerDep
from app.api.routes.common import ERRORS
from app.edge.api_key import API_KEY
from app.schemas import AttentionRequest, AttentionResponse
from app.tasks.attention import AttentionTask

router = APIRouter(tags=["attention"], dependencies=API_KEY)
PNG: dict[int | str, dict[str, Any]] = {
    200: {"content": {"image/png": {}}, "description": "JSON maps, or a PNG with format=png"}
}


@router.post(
    "/attention", response_model=AttentionResponse, response_model_exclude_none=True, responses=ERRORS | PNG
)
async def attention(
    body: AttentionRequest,
    answer: AnswerDep,
    format: Annotated[
        Literal["json", "png"] | None, Query(description="Overrides the body's format.")
    ] = None,
) -> Response:
    """Encoder self-attention, plus decoder self- and cross-attention for translators ([layer][head][q][k])."""
    png = (format or body.format) == "png"
    content, media_type = await answer(AttentionTask.name, body, png=png)
    return Response(content, media_type=media_type)

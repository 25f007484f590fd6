"""Error responses shared by the model routes (documented in OpenAPI)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": ErrorBody,
        "description": "The body cannot be parsed: not UTF-8, JSON nested too deeply, or an integer of more "
        "than 4300 digits (a malformed JSON text is a 422)",
    },
    401: {"model": ErrorBody, "description": "APP_API_KEY is set and the request lacks it"},
    404: {"model": ErrorBody, "description": "Unknown model or language pair"},
    413: {"model": ErrorBody, "description": "The body is larger than APP_MAX_BODY_BYTES"},
    415: {
        "model": ErrorBody,
        "description": "A Content-Encoding other than identity: send the body uncompressed",
    },
    429: {"model": ErrorBody, "description": "Queue full: retry after the Retry-After header's seconds"},
    500: {"model": ErrorBody, "description": "Inference failed for this request's batch"},
    503: {"model": ErrorBody, "description": "Models still loading, or shutting down"},
    504: {"model": ErrorBody, "description": "Past APP_REQUEST_TIMEOUT_S"},
}

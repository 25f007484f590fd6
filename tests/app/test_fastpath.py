"""APP_FAST_PATH: the lean path for JSON POST routes (and those that read the request themselves) answers exactly
as FastAPI does, and runs the routes."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from app.api.routes import attention, system
from app.api.routes import sentiment as sentiment_route
from app.core.settings import Settings
from app.edge.fastpath import FastPath, lean_routes
from app.edge.gate import Gate
from app.schemas import DetectRequest, SentimentRequest, TranslateRequest
from tests.app.conftest import serve

pytestmark = pytest.mark.anyio

Req = tuple[str, dict[str, Any] | bytes, dict[str, str]]
JSON = {"content-type": "application/json"}
FORM = {"content-type": "application/x-www-form-urlencoded"}
VALID: list[Req] = [
    ("/sentiment", {"text": "a good film"}, {}),
    ("/sentiment", {"texts": ["bad", "좋아요", "fine"]}, {}),
    ("/sentiment", {"text": "ok", "model": "sentiment-en"}, {}),
    (
        "/translate",
        {
            "text": "le chat. le chien!",
            "source_lang": "fr",
            "beam_size": 3,
            "num_hypotheses": 2,
            "return_scores": True,
        },
        {},
    ),  # fmt: skip
    ("/translate", {"texts": ["bonjour", "merci"], "source_lang": "fr", "beam_size": 1}, {}),
    ("/translate", {"text": "hallo", "source_lang": "de", "target_lang": "fr"}, {}),
    # the LibreTranslate API's routes read the request themselves: JSON or a form, on the lean path too
    ("/libretranslate/translate", {"q": "le chat", "source": "fr", "target": "en"}, {}),
    ("/libretranslate/translate", b"q=bonjour&q=merci&source=fr&target=en", FORM),
    ("/libretranslate/detect", {"q": "le chat dort"}, {}),
]
SERVICE_ERRORS: list[Req] = [  # valid bodies the service refuses: answered on the fast path too
    ("/sentiment", {"texts": ["a"] * 1000}, {}),
    ("/sentiment", {"text": "x", "model": "nope"}, {}),
    ("/translate", {"text": "x", "source_lang": "xx"}, {}),
    ("/libretranslate/translate", {"q": "x", "source": "xx", "target": "en"}, {}),
    ("/libretranslate/translate", b'{"q": "unterminated', JSON),
    ("/libretranslate/translate", b"q=x", {"content-type": "text/plain"}),
    ("/libretranslate/suggest", {}, {}),
]
DEFERRED: list[Req] = [  # FastAPI answers: invalid bodies (replayed), other content types
    ("/sentiment", {"text": ""}, {}),
    ("/sentiment", {"text": "x", "bogus": 1}, {}),
    ("/sentiment", {"texts": []}, {}),
    ("/translate", {"text": "x", "source_lang": "fr", "beam_size": 2, "num_hypotheses": 3}, {}),
    ("/sentiment", b'{"text": "unterminated', JSON),
    ("/sentiment", b'{"text": "a good film"}', {"content-type": "text/plain"}),
    ("/sentiment", b"", {}),
]
CASES = VALID + SERVICE_ERRORS + DEFERRED


@pytest.fixture(scope="module")
async def without(app_checkpoint_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the same app with APP_FAST_PATH=false."""
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir, fast_path=False)) as (_, client):
        yield client


def fast_path(app: FastAPI) -> FastPath:
    layer = app.middleware_stack
    while not isinstance(layer, Gate):
        layer = layer.app  # type: ignore[union-attr]
    assert layer.fast is not None
    return layer.fast


async def _send(client: httpx.AsyncClient, case: Req) -> tuple[int, Any, str | None]:
    path, body, headers = case
    if isinstance(body, bytes):
        r = await client.post(path, content=body, headers=headers)
    else:
        r = await client.post(path, json=body, headers=headers)
    return r.status_code, r.json() if r.content else None, r.headers.get("content-type")


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
async def test_answers_as_fastapi_does(
    app: FastAPI, client: httpx.AsyncClient, without: httpx.AsyncClient, case: Req
) -> None:
    lean = fast_path(app)
    inner, deferred = lean.app, 0

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        nonlocal deferred
        deferred += 1
        await inner(scope, receive, send)

    lean.app = counting
    try:
        answer = await _send(client, case)
    finally:
        lean.app = inner
    assert answer == await _send(without, case)
    assert (answer[0] == 200) == (case in VALID)
    assert deferred == (case in DEFERRED)


def test_the_lean_routes_are_read_from_the_api_routes(app: FastAPI) -> None:
    routes = fast_path(app).routes
    assert {path: (r.request, r.body, r.route.response_model_exclude_none) for path, r in routes.items()} == {
        "/sentiment": (SentimentRequest, "body", False),
        "/translate": (TranslateRequest, "body", True),
        "/detect": (DetectRequest, "body", True),
        # their functions read the request and return their Response
        "/libretranslate/translate": (None, "", False),
        "/libretranslate/detect": (None, "", False),
        "/libretranslate/suggest": (None, "", False),
    }
    assert lean_routes(attention.router.routes) == {}  # a query parameter (format)
    assert lean_routes(system.router.routes) == {}  # GET routes


@contextmanager
def calls_of(function: Any) -> Iterator[list[FrameType]]:
    """The frames in which `function` (its code) runs on this thread: where a breakpoint would stop."""
    frames: list[FrameType] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is function.__code__:
            frames.append(frame)

    sys.setprofile(profile)
    try:
        yield frames
    finally:
        sys.setprofile(None)


@pytest.mark.parametrize("fast", [True, False])
async def test_a_valid_request_runs_the_route_function(
    client: httpx.AsyncClient, without: httpx.AsyncClient, fast: bool
) -> None:
    with calls_of(sentiment_route.sentiment) as frames:
        r = await (client if fast else without).post("/sentiment", json={"text": "a good film"})
    assert r.status_code == 200
    assert frames


def test_a_route_that_reads_the_request_is_lean_only_when_it_returns_a_response() -> None:
    r = APIRouter()

    @r.post("/own")
    async def own(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    @r.post("/plain", response_model=None)
    async def plain(request: Request):  # type: ignore[no-untyped-def]  # noqa: ANN202 (FastAPI serializes it)
        return {"ok": True}

    assert set(lean_routes(r.routes)) == {"/own"}

"""The lean ASGI path for POST /sentiment and /translate answers exactly as the FastAPI routes do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import ServingApp
from app.settings import Settings
from tests.app.conftest import json_post_scope, serve

pytestmark = pytest.mark.anyio

Req = tuple[str, dict[str, Any] | bytes, dict[str, str] | list[tuple[str, str]]]
JSON = {"content-type": "application/json"}
CASES: list[Req] = [
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
    ),
    ("/translate", {"texts": ["bonjour", "merci"], "source_lang": "fr", "beam_size": 1}, {}),
    ("/translate", {"text": "hallo", "source_lang": "de", "target_lang": "fr"}, {}),
    # errors: FastAPI's validation (replayed body) or the service's own
    ("/sentiment", {"text": ""}, {}),
    ("/sentiment", {"text": "x", "bogus": 1}, {}),
    ("/sentiment", {"texts": []}, {}),
    ("/sentiment", {"texts": ["a"] * 1000}, {}),
    ("/sentiment", {"text": "x", "model": "nope"}, {}),
    ("/translate", {"text": "x", "source_lang": "xx"}, {}),
    ("/translate", {"text": "x", "source_lang": "fr", "beam_size": 2, "num_hypotheses": 3}, {}),
    ("/sentiment", b'{"text": "unterminated', JSON),
    ("/sentiment", b'{"text": "a good film"}', {"content-type": "text/plain"}),
    ("/sentiment", b"", {}),
]


VALID = [c[1] for c in CASES[:6]]
INVALID_BODIES = [
    {"text": ""},
    {"text": "x", "bogus": 1},
    {"texts": []},
    {"text": "x", "source_lang": "fr", "beam_size": 2, "num_hypotheses": 3},
]


async def _send(client: httpx.AsyncClient, case: Req) -> httpx.Response:
    path, body, headers = case
    if isinstance(body, bytes):
        return await client.post(path, content=body, headers=headers)
    return await client.post(path, json=body, headers=headers)


def _comparable(r: httpx.Response) -> tuple[int, Any, str | None, str | None]:
    body = r.json() if r.content else None
    return r.status_code, body, r.headers.get("content-type"), r.headers.get("retry-after")


async def _both_ways(app: FastAPI, client: httpx.AsyncClient, case: Req) -> tuple[Any, Any, int]:
    """The response through the fast path, through FastAPI alone, and how often the fast path deferred."""
    assert isinstance(app, ServingApp)
    fast = app.fast_path
    assert fast is not None
    calls = 0
    fallback = fast.fallback

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        nonlocal calls
        calls += 1
        await fallback(scope, receive, send)

    fast.fallback = counting
    try:
        via_fast = _comparable(await _send(client, case))
        app.fast_path = None
        via_fastapi = _comparable(await _send(client, case))
    finally:
        app.fast_path, fast.fallback = fast, fallback
    return via_fast, via_fastapi, calls


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
async def test_fast_path_matches_fastapi(app: FastAPI, client: httpx.AsyncClient, case: Req) -> None:
    via_fast, via_fastapi, deferred = await _both_ways(app, client, case)
    assert via_fast == via_fastapi
    status = via_fast[0]
    assert status != 500, via_fast
    # valid bodies and the service's own errors are answered by the fast path; invalid bodies by FastAPI
    # valid bodies (answers and the service's own errors) stay on the fast path; invalid bodies,
    # malformed JSON and other content types are deferred to FastAPI with the body replayed
    invalid_body = isinstance(case[1], bytes) or case[1] in INVALID_BODIES
    assert deferred == (1 if invalid_body else 0), via_fast
    assert (status == 200) == (case[1] in VALID)


async def test_api_key_and_cors_behave_the_same(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(api_key="s3cret", cors_origins=["http://ui.example"])
    body = {"text": "a good film"}
    headers_cases: list[tuple[dict[str, str] | list[tuple[str, str]], int]] = [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer s3cret"}, 200),
        ({"Authorization": "bearer s3cret"}, 200),
        ({"Authorization": "Basic s3cret"}, 401),
        ({"X-API-Key": "s3cret"}, 200),
        ({"X-API-Key": "s3cret", "Origin": "http://ui.example"}, 200),
        ([("Authorization", "Basic zzz"), ("Authorization", "Bearer s3cret")], 401),  # the first one counts
        ([("Authorization", "Bearer s3cret"), ("Authorization", "Basic zzz")], 200),
        ([("X-API-Key", "s3cret"), ("Content-Type", "text/plain")], 422),  # not JSON
    ]
    async with serve(settings) as (app, client):
        for headers, status in headers_cases:
            via_fast, via_fastapi, _ = await _both_ways(app, client, ("/sentiment", body, headers))
            assert via_fast == via_fastapi, headers
            assert via_fast[0] == status, headers
        r = await client.post(
            "/sentiment", json=body, headers={"X-API-Key": "s3cret", "Origin": "http://ui.example"}
        )
        assert r.headers["access-control-allow-origin"] == "http://ui.example"


async def test_fast_path_requests_are_counted_in_metrics(client: httpx.AsyncClient) -> None:
    before = await client.get("/metrics")
    assert (await client.post("/sentiment", json={"text": "fine"})).status_code == 200
    after = await client.get("/metrics")

    def count(text: str) -> float:
        prefix = 'http_requests_total{method="POST",route="/sentiment",status="200"}'
        lines = [line for line in text.splitlines() if line.startswith(prefix)]
        return float(lines[0].split()[-1]) if lines else 0.0

    assert count(after.text) == count(before.text) + 1


async def test_fast_path_serves_behind_a_root_path(app: FastAPI, client: httpx.AsyncClient) -> None:
    # uvicorn --root-path /api puts the prefix into both root_path and path: routing uses the path below it
    assert isinstance(app, ServingApp)
    fast = app.fast_path
    assert fast is not None
    fallback, served, deferred = fast.fallback, 0, 0

    class Spy:
        accepts = staticmethod(fast.accepts)

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            nonlocal served
            served += 1
            await fast(scope, receive, send)

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        nonlocal deferred
        deferred += 1
        await fallback(scope, receive, send)

    def count(metrics: str) -> float:  # the route label of the fast path's answers
        prefix = 'http_requests_total{method="POST",route="/sentiment",status="200"}'
        lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
        return float(lines[0].split()[-1]) if lines else 0.0

    before = count((await client.get("/metrics")).text)
    body = {"texts": ["a good film", "awful"]}
    app.fast_path, fast.fallback = Spy(), counting  # type: ignore[assignment]
    try:
        transport = httpx.ASGITransport(app, root_path="/api")
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as prefixed:
            behind = await prefixed.post("/api/sentiment", json=body)
            unknown = await prefixed.post("/api/nothing", json=body)
    finally:
        app.fast_path, fast.fallback = fast, fallback
    assert (served, deferred) == (1, 0)  # answered by the fast path, not FastAPI
    assert behind.status_code == 200
    assert behind.json() == (await client.post("/sentiment", json=body)).json()
    assert unknown.status_code == 404
    # labelled by the route below the root path (the direct request above counts too)
    assert count((await client.get("/metrics")).text) == before + 2


@pytest.mark.parametrize("fast_path", [True, False])
async def test_a_client_that_leaves_before_its_body_is_499_on_both_paths(
    app: FastAPI, client: httpx.AsyncClient, fast_path: bool
) -> None:
    assert isinstance(app, ServingApp)
    fast, sent = app.fast_path, []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    def counts(text: str) -> tuple[float, float]:  # /sentiment POSTs answered 499 and 400
        found = {"499": 0.0, "400": 0.0}
        for line in text.splitlines():
            for status in found:
                if line.startswith(
                    f'http_requests_total{{method="POST",route="/sentiment",status="{status}"}}'
                ):
                    found[status] = float(line.split()[-1])
        return found["499"], found["400"]

    before = counts((await client.get("/metrics")).text)
    app.fast_path = fast if fast_path else None
    try:
        await app(json_post_scope("/sentiment", 20), receive, send)
    finally:
        app.fast_path = fast
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] in ([], [499])  # nobody reads it
    after = counts((await client.get("/metrics")).text)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)  # counted as left, not as a bad request

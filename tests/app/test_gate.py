"""app.edge.gate.Gate, the one layer before routing: every request is routed by FastAPI and counted once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from app.api.deps import Answer, answer_for
from app.core.settings import Settings
from app.serving.service import Service
from tests.app.conftest import json_post_scope, serve

pytestmark = pytest.mark.anyio


def count(metrics: str, route: str, status: int, method: str = "POST") -> float:
    prefix = f'transformer_serving_http_requests_total{{method="{method}",route="{route}",status="{status}"}}'
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


async def test_model_routes_are_served_by_their_fastapi_routes(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The route functions run (app.dependency_overrides reach them) for valid requests."""
    served: list[Service] = []

    async def spy(request: Request) -> Answer:
        served.append(request.app.state.service)
        return served[-1].answer

    app.dependency_overrides[answer_for] = spy
    try:
        assert (await client.post("/sentiment", json={"text": "a good film"})).status_code == 200
        translate = {"text": "le chat", "source_lang": "fr", "beam_size": 1}
        assert (await client.post("/translate", json=translate)).status_code == 200
    finally:
        app.dependency_overrides.clear()
    assert len(served) == 2


async def test_each_request_is_counted_once(client: httpx.AsyncClient) -> None:
    before = (await client.get("/metrics")).text
    assert (await client.post("/sentiment", json={"text": "fine"})).status_code == 200
    assert (await client.post("/sentiment", json={"text": ""})).status_code == 422
    after = (await client.get("/metrics")).text
    assert count(after, "/sentiment", 200) == count(before, "/sentiment", 200) + 1
    assert count(after, "/sentiment", 422) == count(before, "/sentiment", 422) + 1


async def test_routes_are_served_and_labelled_behind_a_root_path(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    # uvicorn --root-path /api puts the prefix into both root_path and path: routing uses the path below it
    before = count((await client.get("/metrics")).text, "/sentiment", 200)
    body = {"texts": ["a good film", "awful"]}
    transport = httpx.ASGITransport(app, root_path="/api")
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as prefixed:
        behind = await prefixed.post("/api/sentiment", json=body)
        unknown = await prefixed.post("/api/nothing", json=body)
    assert behind.status_code == 200
    assert behind.json() == (await client.post("/sentiment", json=body)).json()
    assert unknown.status_code == 404
    # labelled by the route below the root path (the direct request above counts too)
    assert count((await client.get("/metrics")).text, "/sentiment", 200) == before + 2


@pytest.mark.parametrize("fast_path", [True, False])
async def test_a_client_that_leaves_before_its_body_is_499_not_400(
    make_settings: Callable[..., Settings], fast_path: bool
) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with serve(make_settings(fast_path=fast_path)) as (app, client):
        before = (await client.get("/metrics")).text
        await app(json_post_scope("/sentiment", 20), receive, send)
        after = (await client.get("/metrics")).text
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] in ([], [499])  # nobody reads it
    assert count(after, "/sentiment", 499) == count(before, "/sentiment", 499) + 1  # counted as left
    assert count(after, "/sentiment", 400) == count(before, "/sentiment", 400)  # not as a bad request

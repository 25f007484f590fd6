"""app.edge.gate.GatedFastAPI: HTTP requests enter at the gate, past FastAPI's own outer layers, and are
answered exactly as through them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.trace import NoOpTracerProvider

from app.core.metrics import Metrics
from app.core.settings import Settings
from app.edge.gate import Gate, GatedFastAPI

pytestmark = pytest.mark.anyio

REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/sentiment", {"text": "a good film"}),  # the lean path
    ("POST", "/sentiment", {"texts": ["a good film", "awful"]}),
    ("POST", "/sentiment", {"text": ""}),  # 422 from FastAPI, the body replayed
    ("POST", "/translate", {"text": "le chat", "source_lang": "fr", "beam_size": 1}),
    ("GET", "/health", None),
    ("GET", "/nowhere", None),  # 404
    ("POST", "/health", None),  # 405
]


async def answers(client: httpx.AsyncClient) -> list[tuple[int, bytes, str]]:
    out = []
    for method, path, body in REQUESTS:
        r = await client.request(method, path, json=body, headers={"X-Request-ID": "same-id"})
        out.append((r.status_code, r.content, r.headers["x-request-id"]))
    return out


async def test_http_requests_enter_at_the_gate(app: FastAPI, client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).status_code == 200
    assert isinstance(app, GatedFastAPI)
    assert isinstance(app.gate, Gate)


async def test_the_gate_answers_as_fastapis_own_way_does(app: FastAPI, client: httpx.AsyncClient) -> None:
    assert isinstance(app, GatedFastAPI)
    await client.get("/health")
    gated = await answers(client)
    gate = app.gate
    app.gate = None  # FastAPI's own way: its outer layers, then the gate among its middleware
    try:
        plain = await answers(client)
    finally:
        app.gate = gate
    assert gated == plain
    assert [status for status, _, _ in gated] == [200, 200, 422, 200, 200, 404, 405]


async def test_with_telemetry_requests_take_fastapis_way() -> None:
    """FastAPI's telemetry wraps each request in its spans: the gate is not entered directly then."""
    app = GatedFastAPI(telemetry={"tracer_provider": NoOpTracerProvider()})
    app.add_middleware(Gate, settings=Settings(), metrics=Metrics(), routes=[])

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "yes"}

    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.get("/ping")
    assert (r.status_code, r.json()) == (200, {"pong": "yes"})
    assert r.headers["x-request-id"]  # the gate ran, inside FastAPI's layers
    assert app.found
    assert app.gate is None


async def test_an_error_in_the_gates_checks_is_a_json_500(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Starlette's ServerErrorMiddleware gave an error outside the route, now that it is skipped."""

    def broken(self: Gate, scope: Any) -> None:
        raise RuntimeError("a bug in a check")

    monkeypatch.setattr(Gate, "_refusal", broken)
    r = await client.get("/health")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-request-id"]

"""APP_API_KEY (checked before the body is read, in one place, GET and POST alike) and APP_CORS_ORIGINS."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.core.errors import UNAUTHORIZED
from app.core.settings import Settings
from tests.app.conftest import serve

pytestmark = pytest.mark.anyio
Headers = dict[str, str] | list[tuple[str, str]]


async def test_api_key(make_settings: Callable[..., Settings]) -> None:
    async with serve(make_settings(api_key="s3cret")) as (_, client):
        for path in ("/health", "/ready"):
            assert (await client.get(path)).status_code == 200
            head = await client.head(path)
            assert (head.status_code, head.content) == (200, b"")
        body = {"text": "a dog"}
        r = await client.post("/sentiment", json=body)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert (await client.post("/sentiment", json=body, headers={"X-API-Key": "wrong"})).status_code == 401
        assert (
            await client.post("/sentiment", json=body, headers={"Authorization": "Bearer wrong"})
        ).status_code == 401
        assert (
            await client.post("/sentiment", json=body, headers={"Authorization": "Bearer s3cret"})
        ).status_code == 200
        assert (
            await client.post("/sentiment", json=body, headers={"X-API-Key": "s3cret"})
        ).status_code == 200
        for path in ("/models", "/metrics"):
            assert (await client.get(path)).status_code == 401
            assert (await client.get(path, headers={"X-API-Key": "s3cret"})).status_code == 200
        r = await client.post("/translate", json={"text": "le chat", "source_lang": "fr"})
        assert r.status_code == 401
        r = await client.post("/attention", json={"model": "sentiment-en", "text": "a"})
        assert r.status_code == 401
        # the key is checked before the body is read or parsed: malformed JSON without it is a 401 (not 422)
        for path in ("/sentiment", "/translate", "/attention"):
            headers = {"content-type": "application/json"}
            r = await client.post(path, content=b'{"text": ', headers=headers)
            assert (r.status_code, r.json()["detail"]) == (401, UNAUTHORIZED)
            r = await client.post(path, content=b'{"text": ', headers=headers | {"X-API-Key": "s3cret"})
            assert r.status_code == 422
        metrics = (await client.get("/metrics", headers={"X-API-Key": "s3cret"})).text
        assert (
            'transformer_serving_http_requests_total{method="POST",route="/attention",status="401"} 2.0'
            in metrics
        )
        r = await client.post("/health", content=b"{")  # a path without a POST route: FastAPI's 405
        assert r.status_code == 405


async def test_api_key_is_checked_before_the_body_on_cors_requests_too(
    make_settings: Callable[..., Settings],
) -> None:
    async with serve(make_settings(api_key="s3cret", cors_origins=["http://ui.example"])) as (_, client):
        for origin, allowed in (("http://ui.example", "http://ui.example"), ("http://evil.example", None)):
            headers = {"content-type": "application/json", "Origin": origin}
            r = await client.post("/sentiment", content=b'{"text": ', headers=headers)
            assert (r.status_code, r.json()["detail"]) == (401, UNAUTHORIZED)
            assert r.headers.get("access-control-allow-origin") == allowed  # readable by the allowed page
            r = await client.post("/sentiment", json={"text": "a"}, headers=headers | {"X-API-Key": "s3cret"})
            assert r.status_code == 200


async def test_cors(make_settings: Callable[..., Settings]) -> None:
    async with serve(make_settings(cors_origins=["http://example.com"])) as (_, client):
        r = await client.options(
            "/sentiment",
            headers={"Origin": "http://example.com", "Access-Control-Request-Method": "POST"},
        )
        assert r.headers["access-control-allow-origin"] == "http://example.com"


async def test_answers_given_before_routing_and_500s_carry_cors_headers(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page on an allowed origin can read a 413 (refused from Content-Length, before any middleware) and a
    500 from an unexpected error (Starlette's own 500 handler runs outside the CORS middleware)."""
    settings = make_settings(cors_origins=["http://ui.example"], max_body_bytes=1024)
    async with serve(settings) as (app, client):
        for origin, allowed in (("http://ui.example", "http://ui.example"), ("http://evil.example", None)):
            headers = {"Origin": origin, "content-type": "application/json"}
            r = await client.post("/sentiment", content=b" " * 2000, headers=headers)
            assert r.status_code == 413
            assert "the limit is 1024 bytes (APP_MAX_BODY_BYTES)" in r.json()["detail"]
            assert r.headers.get("access-control-allow-origin") == allowed

        def broken() -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(app.state.service, "models", broken)
        r = await client.get("/models", headers={"Origin": "http://ui.example"})
        assert (r.status_code, r.json()) == (500, {"detail": "internal error: RuntimeError"})
        assert r.headers["access-control-allow-origin"] == "http://ui.example"
        r = await client.get("/models")  # the same without CORS
        assert (r.status_code, r.json()) == (500, {"detail": "internal error: RuntimeError"})
        metrics = (await client.get("/metrics")).text
        assert (
            'transformer_serving_http_requests_total{method="GET",route="/models",status="500"} 2.0'
            in metrics
        )
        assert (
            'transformer_serving_http_requests_total{method="POST",route="/sentiment",status="413"} 2.0'
            in metrics
        )
        assert (await client.post("/sentiment", json={"text": "still serving"})).status_code == 200


async def test_the_key_is_read_one_way_for_get_and_post(make_settings: Callable[..., Settings]) -> None:
    cases: list[tuple[Headers, int]] = [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer s3cret"}, 200),
        ({"Authorization": "bearer s3cret"}, 200),
        ({"Authorization": "Basic s3cret"}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"X-API-Key": "s3cret"}, 200),
        ({"X-API-Key": "wrong", "Authorization": "Bearer s3cret"}, 200),  # either one
        ({"X-API-Key": "s3cret", "Origin": "http://ui.example"}, 200),
        ([("Authorization", "Basic zzz"), ("Authorization", "Bearer s3cret")], 401),  # the first one counts
        ([("Authorization", "Bearer s3cret"), ("Authorization", "Basic zzz")], 200),
    ]
    async with serve(make_settings(api_key="s3cret", cors_origins=["http://ui.example"])) as (_, client):
        for headers, status in cases:
            r = await client.post("/sentiment", json={"text": "a good film"}, headers=headers)
            assert r.status_code == status, headers
            assert (await client.get("/models", headers=headers)).status_code == status, headers

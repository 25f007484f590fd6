"""APP_API_KEY (checked before the body is read, in one place, GET and POST alike) and APP_CORS_ORIGINS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.core.errors import UNAUTHORIZED
from app.core.settings import Settings
from app.edge.api_key import authorized
from tests.app.conftest import eager_settings, serve

pytestmark = pytest.mark.anyio
KEY = "s3cret"


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Apps of this module's own run eager models: they test the HTTP surface, not the graphs."""
    return eager_settings(make_settings)


def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


# --- one parser, one rule (RFC 9110 credentials: scheme 1*SP token), for every keyed route ---------------------

ACCEPTED: list[list[tuple[bytes, bytes]]] = [
    [(b"authorization", b"Bearer s3cret")],
    [(b"authorization", b"bearer s3cret")],
    [(b"authorization", b"bearer  s3cret")],  # 1*SP: two spaces or more
    [(b"authorization", b"BEARER    s3cret")],
    [(b"authorization", b"Bearer s3cret  ")],  # trailing whitespace: httptools keeps it, h11 strips it
    [(b"x-api-key", b"s3cret")],
    [(b"x-api-key", b"s3cret \t")],
    [(b"x-api-key", b"wrong"), (b"authorization", b"Bearer s3cret")],  # either one
    [(b"authorization", b"Bearer s3cret"), (b"authorization", b"Basic zzz")],  # the first one counts
]
REFUSED: list[list[tuple[bytes, bytes]]] = [
    [],
    [(b"authorization", b"Bearer wrong")],
    [(b"authorization", b"Bearer\ts3cret")],  # a tab is not SP
    [(b"authorization", b"Bearers3cret")],
    [(b"authorization", b"Bearer s3cret x")],
    [(b"authorization", b"Bearer")],
    [(b"authorization", b"Bearer  ")],
    [(b"authorization", b"Basic s3cret")],
    [(b"x-api-key", b"s3cre")],
    [(b"x-api-key", b"")],
    [(b"authorization", b"Basic zzz"), (b"authorization", b"Bearer s3cret")],
]


def test_the_credentials_parser() -> None:
    for headers in ACCEPTED:
        assert authorized(scope(*headers), KEY.encode()), headers
    for headers in REFUSED:
        assert not authorized(scope(*headers), KEY.encode()), headers


async def test_every_keyed_route_takes_the_key_the_same_way(make_settings: Callable[..., Settings]) -> None:
    requests: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/models", None),
        ("GET", "/metrics", None),
        ("POST", "/sentiment", {"text": "a good film"}),  # the fast path
        ("POST", "/translate", {"text": "le chat", "source_lang": "fr", "beam_size": 1}),
        ("POST", "/attention", {"model": "sentiment-en", "text": "a dog"}),  # FastAPI's routing
    ]
    async with serve(make_settings(api_key=KEY)) as (_, client):
        for cases, status in [(ACCEPTED, 200), (REFUSED, 401)]:
            for headers in cases:
                for method, path, body in requests:
                    r = await client.request(method, path, json=body, headers=headers)
                    assert r.status_code == status, (path, headers)
                    if status == 401:
                        assert r.headers["www-authenticate"] == "Bearer"


async def test_the_key_is_checked_before_the_body_and_probes_stay_open(
    make_settings: Callable[..., Settings],
) -> None:
    async with serve(make_settings(api_key=KEY)) as (_, client):
        for path in ("/health", "/ready"):
            assert (await client.get(path)).status_code == 200
            head = await client.head(path)
            assert (head.status_code, head.content) == (200, b"")
        # malformed JSON without the key is a 401 (not 422): the key is checked before the body is read
        for path in ("/sentiment", "/translate", "/attention"):
            headers = {"content-type": "application/json"}
            r = await client.post(path, content=b'{"text": ', headers=headers)
            assert (r.status_code, r.json()["detail"]) == (401, UNAUTHORIZED)
            r = await client.post(path, content=b'{"text": ', headers=headers | {"X-API-Key": KEY})
            assert r.status_code == 422
        metrics = (await client.get("/metrics", headers={"X-API-Key": KEY})).text
        assert (
            'transformer_serving_http_requests_total{method="POST",route="/attention",status="401"} 1.0'
            in metrics
        )
        r = await client.post("/health", content=b"{")  # a path without a POST route: FastAPI's 405
        assert r.status_code == 405


async def test_api_key_is_checked_before_the_body_on_cors_requests_too(
    make_settings: Callable[..., Settings],
) -> None:
    async with serve(make_settings(api_key=KEY, cors_origins=["http://ui.example"])) as (_, client):
        for origin, allowed in (("http://ui.example", "http://ui.example"), ("http://evil.example", None)):
            headers = {"content-type": "application/json", "Origin": origin}
            r = await client.post("/sentiment", content=b'{"text": ', headers=headers)
            assert (r.status_code, r.json()["detail"]) == (401, UNAUTHORIZED)
            assert r.headers.get("access-control-allow-origin") == allowed  # readable by the allowed page
            r = await client.post("/sentiment", json={"text": "a"}, headers=headers | {"X-API-Key": KEY})
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

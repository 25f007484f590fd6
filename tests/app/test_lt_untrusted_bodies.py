"""The LibreTranslate API against hostile bodies (issue 29, item 3): JSON nested past the parser's depth is a
400 (403 on a keyed server without the key), never a 500 with a traceback; a wrong key in the headers is
refused before the body is read, and an anonymous JSON body without `api_key` is not parsed."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from tests.app.conftest import json_post_scope, serve

pytestmark = pytest.mark.anyio
LT = "/libretranslate"
DEEP = b"[" * 5000
KEY = "lt-secret"


@pytest.mark.parametrize("route", ["translate", "detect"])
async def test_deeply_nested_json_is_a_400(
    client: httpx.AsyncClient, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        r = await client.post(f"{LT}/{route}", content=DEEP, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "nested too deeply" in r.json()["error"]
    assert not [rec for rec in caplog.records if rec.exc_info or rec.levelno >= logging.ERROR]


async def test_keyed_server_answers_403_without_the_key_and_400_with_it(app_checkpoint_dir: Any) -> None:
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir, api_key=KEY)) as (_, client):
        for route in ("translate", "detect"):
            json_kind = {"content-type": "application/json"}
            r = await client.post(f"{LT}/{route}", content=DEEP, headers=json_kind)
            assert r.status_code == 403, r.text
            deep_with_key = b'{"api_key": "%s", "q": ' % KEY.encode() + DEEP
            r = await client.post(f"{LT}/{route}", content=deep_with_key, headers=json_kind)
            assert r.status_code == 403, r.text  # a body that cannot be parsed yields no key
            r = await client.post(f"{LT}/{route}", content=DEEP, headers=json_kind | {"x-api-key": KEY})
            assert r.status_code == 400, r.text


async def test_a_wrong_header_key_is_refused_before_the_body_is_read(app_checkpoint_dir: Any) -> None:
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir, api_key=KEY)) as (app, _):
        scope = json_post_scope(f"{LT}/translate", 1 << 20)
        scope["headers"] = [*scope["headers"], (b"x-api-key", b"wrong")]
        read: list[bool] = []
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            read.append(True)
            return {"type": "http.request", "body": b"{" + b" " * 100, "more_body": True}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
    assert sent[0]["status"] == 403
    assert not read


@pytest.mark.parametrize("name", ["api_key", "apiKey"])
async def test_the_key_in_the_query_settles_a_json_body_without_one(
    app_checkpoint_dir: Any, name: str
) -> None:
    """apiKey (the npm client's spelling) counts in the query as in the body."""
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir, api_key=KEY)) as (_, client):
        body = {"q": "Le chat dort.", "source": "fr", "target": "en"}
        r = await client.post(f"{LT}/translate", params={name: KEY}, json=body)
        assert r.status_code == 200, r.text
        r = await client.post(f"{LT}/translate", params={name: "wrong"}, json=body)
        assert r.status_code == 403, r.text

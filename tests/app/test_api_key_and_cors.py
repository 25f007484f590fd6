"""APP_API_KEY: checked before the body is read, in one place, GET and POST alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.settings import Settings
from tests.app.conftest import serve

pytestmark = pytest.mark.anyio
Headers = dict[str, str] | list[tuple[str, str]]


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

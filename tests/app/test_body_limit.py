"""APP_MAX_BODY_BYTES: 413 naming the limit, whether the size is declared or the body is chunked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest

from app.core.settings import Settings
from tests.app.conftest import eager_settings, serve

pytestmark = pytest.mark.anyio
LIMIT = 2048


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Apps of this module's own run eager models: they test the HTTP surface, not the graphs."""
    return eager_settings(make_settings)


def _big(route: str) -> bytes:
    text = "word " * 1000  # ~5 KB, over LIMIT
    body = {"text": text} if route == "/sentiment" else {"model": "sentiment-en", "text": text}
    return json.dumps(body).encode()


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 512):
        yield data[i : i + 512]


@pytest.mark.parametrize("route", ["/sentiment", "/attention"])
async def test_bodies_over_the_limit_get_413(make_settings: Callable[..., Settings], route: str) -> None:
    async with serve(make_settings(max_body_bytes=LIMIT)) as (_, client):
        declared = await client.post(route, content=_big(route), headers={"content-type": "application/json"})
        assert declared.status_code == 413
        assert declared.json()["detail"].startswith(
            f"request body too large: a body of {len(_big(route))} bytes"
        )
        assert f"the limit is {LIMIT} bytes (APP_MAX_BODY_BYTES)" in declared.json()["detail"]
        chunked = await client.post(
            route, content=_chunks(_big(route)), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413
        assert f"the limit is {LIMIT} bytes (APP_MAX_BODY_BYTES)" in chunked.json()["detail"]
        small = {"text": "fine"} if route == "/sentiment" else {"model": "sentiment-en", "text": "fine"}
        assert (await client.post(route, content=_chunks(json.dumps(small).encode()),
                                  headers={"content-type": "application/json"})).status_code == 200  # fmt: skip
        # both refusals are counted, the declared one before routing
        metrics = (await client.get("/metrics")).text
        assert (
            f'transformer_serving_http_requests_total{{method="POST",route="{route}",status="413"}} 2.0'
            in metrics
        )


def test_limit_below_1024_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="max_body_bytes"):
        Settings(max_body_bytes=10)

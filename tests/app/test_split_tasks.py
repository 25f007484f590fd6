"""A task that `splits` (sentiment) runs its text work in the HTTP process: only its batch items (token ids,
model, key, deadline) cross the channel to the model process, never the request or the response, and the
answers are those of one process, errors included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.core.metrics import Metrics
from app.core.settings import Settings
from app.main import create_app
from app.parallel.engine import Engine
from app.parallel.remote import RemoteService
from app.schemas import SentimentRequest
from app.service import Service
from tests.app.conftest import wait_ready

pytestmark = pytest.mark.anyio
PLAIN = (int, float, str, bool, type(None))


def plain(value: Any) -> bool:
    """Whether `value` is built of builtins only (what crosses for a split task)."""
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    return type(value) in PLAIN


async def test_sentiment_crosses_as_items_only(sentiment_only_dir: Path, tmp_path: Path) -> None:
    settings = Settings(checkpoint_dir=sentiment_only_dir)
    engine = Engine(Service(settings, Metrics()), http_workers=1)
    crossed: list[tuple[Any, ...]] = []
    answered: list[str] = []
    submit, answer = engine._submit, engine.service.answer

    async def spy_submit(*args: Any, **kwargs: Any) -> Any:
        crossed.append(args)
        return await submit(*args, **kwargs)

    async def spy_answer(task: str, *args: Any, **kwargs: Any) -> Any:
        answered.append(task)
        return await answer(task, *args, **kwargs)

    engine._submit = spy_submit  # type: ignore[method-assign]  # the channel's handlers bind these
    engine.service.answer = spy_answer  # type: ignore[method-assign]
    stop, path = asyncio.Event(), str(tmp_path / "engine.sock")
    serving = asyncio.create_task(engine.serve(path, stop))
    remote = RemoteService(settings, Metrics(), path)
    app = create_app(settings, remote)
    texts = ["a cat", "the movie was long and the acting was not very good at all", "fine"]
    try:
        async with (
            LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
        ):
            await wait_ready(client)
            r = await client.post("/sentiment", json={"texts": texts})
            assert r.status_code == 200, r.text
            local = await answer("sentiment", SentimentRequest(texts=texts))
            assert r.json() == local.model_dump()
            [(task, jobs, deadline, field)] = crossed
            assert (task, field) == ("sentiment", "texts")
            assert isinstance(deadline, float)
            assert [(model, key, len(items)) for model, key, items in jobs] == [("sentiment-en", None, 3)]
            assert plain(jobs)
            assert answered == []  # the request never reached the model process whole

            bad = await client.post("/sentiment", json={"texts": ["a"], "model": "nope"})
            assert bad.status_code == 404, bad.text
            assert "no sentiment model named 'nope'" in bad.json()["detail"]
            assert len(crossed) == 1  # refused in the HTTP process
    finally:
        stop.set()
        await serving

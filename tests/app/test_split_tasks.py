"""A task that `splits` (sentiment, translation, attention) runs its text work in the HTTP process: only its
batch items (token ids and their options, model, key, deadline) cross the channel to the model process, never
the request or the response, nothing of them pickled, and the answers are those of one process, errors
included."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.core.metrics import Metrics
from app.core.settings import Settings
from app.main import create_app
from app.parallel import frames
from app.parallel.engine import Engine
from app.parallel.remote import RemoteService
from app.registry import fingerprint
from app.schemas import AttentionRequest, SentimentRequest, TranslateRequest
from app.serving.service import Service
from tests.app.conftest import wait_graphs, wait_ready

pytestmark = pytest.mark.anyio
PLAIN = (int, float, str, bool, type(None))


def plain(value: Any) -> bool:
    """Whether `value` is built of builtins only (what crosses for sentiment)."""
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    return type(value) in PLAIN


@dataclass
class Split:
    """An HTTP client of a RemoteService, and what reached its model process: `crossed`, the submit calls'
    arguments; `answered`, the tasks of whole answer calls; `local`: the model process's own answer."""

    client: httpx.AsyncClient
    local: Any
    crossed: list[tuple[Any, ...]] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)


@asynccontextmanager
async def split(checkpoints: Path, tmp_path: Path) -> AsyncIterator[Split]:
    """Engine and RemoteService in one event loop over a Unix socket, the Engine's calls recorded."""
    settings = Settings(checkpoint_dir=checkpoints)
    engine = Engine(Service(settings, Metrics()), http_workers=1)
    submit, answer = engine._submit, engine.service.answer

    def spy_submit(*args: Any, **kwargs: Any) -> Any:  # called as the frame is read: no task of its own
        seen.crossed.append(args)
        return submit(*args, **kwargs)

    async def spy_answer(task: str, *args: Any, **kwargs: Any) -> Any:
        seen.answered.append(task)
        return await answer(task, *args, **kwargs)

    engine._submit = spy_submit  # type: ignore[method-assign]  # the channel's handlers bind these
    engine.service.answer = spy_answer  # type: ignore[method-assign]
    stop, path = asyncio.Event(), str(tmp_path / "engine.sock")
    serving = asyncio.create_task(engine.serve(path, stop))
    app = create_app(settings, RemoteService(settings, Metrics(), path))
    try:
        async with (
            LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
        ):
            await wait_ready(client)
            await wait_graphs(client)  # both answers on the graphs (the eager path rounds apart)
            seen = Split(client, answer)
            yield seen
    finally:
        stop.set()
        await serving


async def test_sentiment_crosses_as_items_only(sentiment_only_dir: Path, tmp_path: Path) -> None:
    texts = ["a cat", "the movie was long and the acting was not very good at all", "fine"]
    async with split(sentiment_only_dir, tmp_path) as s:
        r = await s.client.post("/sentiment", json={"texts": texts})
        assert r.status_code == 200, r.text
        local = await s.local("sentiment", SentimentRequest(texts=texts))
        assert r.json() == local.model_dump()
        [(task, jobs, deadline, where)] = s.crossed
        assert (task, where) == ("sentiment", "texts")
        assert isinstance(deadline, float)
        version = fingerprint(sentiment_only_dir / "sentiment-en")  # the items' model@version: the served one
        assert [(model, key, len(items)) for model, key, items, _ in jobs] == [
            (f"sentiment-en@{version}", None, 3)
        ]
        assert [costs for *_, costs in jobs] == [
            [len(ids) for ids, _ in items] for *_, items, _ in jobs
        ]  # tokens
        assert plain(jobs)
        assert s.answered == []  # the request never reached the model process whole

        bad = await s.client.post("/sentiment", json={"texts": ["a"], "model": "nope"})
        assert bad.status_code == 404, bad.text
        assert "no sentiment model named 'nope'" in bad.json()["detail"]
        assert len(s.crossed) == 1  # refused in the HTTP process


async def test_translation_crosses_as_sentences(app_checkpoint_dir: Path, tmp_path: Path) -> None:
    body = {"texts": ["Le chat dort. Il lit.", "la maison"], "source_lang": "fr", "num_hypotheses": 2}
    async with split(app_checkpoint_dir, tmp_path) as s:
        r = await s.client.post("/translate", json=body)
        assert r.status_code == 200, r.text
        local = await s.local("translation", TranslateRequest(**body))
        assert r.json() == local.model_dump(mode="json", exclude_none=True)
        [(task, jobs, _, _)] = s.crossed
        [(model, key, items, costs)] = jobs
        assert len(costs) == len(items)
        version = fingerprint(app_checkpoint_dir / "translate-fr-en")
        assert (task, model, key.target_lang) == ("translation", f"translate-fr-en@{version}", "en")
        assert len(items) == 3  # the sentences, split in the HTTP process
        assert all(plain(item.ids) for item in items)
        assert s.answered == []


async def test_attention_crosses_as_ids_and_maps_and_nothing_of_a_request_is_pickled(
    app_checkpoint_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pickled: list[bytes] = []

    def dumps(value: Any, protocol: int | None = None) -> bytes:
        pickled.append(data := pickle.dumps(value, protocol))
        return data

    monkeypatch.setattr(
        frames, "pickle", SimpleNamespace(dumps=dumps, loads=pickle.loads, HIGHEST_PROTOCOL=5)
    )
    attend = {"model": "translate-fr-en", "text": "Le chat dort", "layers": [0]}  # no target: greedy first
    translate = {
        "texts": ["Le chat dort. 15 €"],
        "source_lang": "fr",
        "num_hypotheses": 2,
        "replace_unknowns": True,
    }
    async with split(app_checkpoint_dir, tmp_path) as s:
        r = await s.client.post("/attention", json=attend)
        assert r.status_code == 200, r.text
        body, media = await s.local("attention", AttentionRequest(**attend))
        assert (r.content, r.headers["content-type"]) == (body, media)
        assert [call[0] for call in s.crossed] == ["translation", "attention"]
        [(_, _, [item], [cost])] = s.crossed[1][1]
        assert cost == len(item.source) + len(item.target or [])  # its price crossed too
        assert (item.select.encoder, item.select.decoder) == ([0], [0])  # the selection crossed with the ids
        r = await s.client.post("/translate", json=translate)
        assert r.status_code == 200, r.text
        local = await s.local("translation", TranslateRequest(**translate))
        assert r.json() == local.model_dump(mode="json", exclude_none=True)
        assert s.answered == []
    assert pickled  # hello, state and heartbeats: pickled, and seen here
    for data in pickled:
        for word in (b"chat", b"\xe2\x82\xac", b"Sentence", b"Hypothesis", b"AttentionItem", b"TextMaps"):
            assert word not in data

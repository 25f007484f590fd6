"""A new task type is one task object plus its schema, its route and its tests: a toy text-length
"classifier" (token counts through each sentiment model's tokenizer, batched like any task) is registered
here and served over HTTP beside the built-in tasks, in one process and across the channel of the
multi-process layout, with nothing of the shared machinery changed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, Field

from app.api.deps import DisconnectDep, ServiceDep
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.main import create_app
from app.parallel.engine import Engine
from app.parallel.remote import RemoteService
from app.registry import ModelEntry
from app.serving.service import Service
from app.tasks.sentiment import group_by_model, scatter
from app.tasks.sentiment_routes import sentiment_routes
from app.tasks.served import default_tasks
from app.tasks.task import BatchSpec, Context, Disconnected, Job, Task
from model import LoadedModel, Tokenizer, load_checkpoint
from tests.app.conftest import eventually, wait_ready

pytestmark = pytest.mark.anyio
LONG = 6  # tokens from which a text is "long"


class LengthRequest(BaseModel):
    texts: list[str] = Field(min_length=1, max_length=8)
    model: str | None = None


class LengthResult(BaseModel):
    tokens: int
    label: str


class LengthResponse(BaseModel):
    model: str
    results: list[LengthResult]


class LengthHandler:
    """One model's tokenizer; a batch item is a text, its output the text's token count."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.batches: list[int] = []  # the size of each batch it ran

    def costs(self, items: list[str]) -> list[int]:
        return [1] * len(items)

    def run(self, items: list[str]) -> list[int]:
        self.batches.append(len(items))
        return [len(self.tokenizer.encode(text)) for text in items]


class LengthTask(Task):
    name = "length"

    def serves(self, entry: ModelEntry) -> bool:
        return entry.task == "sentiment"

    def load(self, entry: ModelEntry, loaded: LoadedModel | None) -> LengthHandler:
        assert loaded is not None
        return LengthHandler(loaded.tokenizer)

    def batching(self, model: str, key: Hashable) -> BatchSpec:
        return BatchSpec(f"{model}/length")

    async def answer(
        self, ctx: Context, req: LengthRequest, disconnected: Disconnected = None, **options: Any
    ) -> LengthResponse:
        registry, texts = ctx.ready_registry(), req.texts
        ctx.limits.check_texts(texts, "texts")
        groups = group_by_model(sentiment_routes(registry).models_for(texts, req.model))
        items = {name: [texts[i] for i in idxs] for name, idxs in groups.items()}
        jobs = [Job(self, name, None, its, self.handlers[name].costs(its)) for name, its in items.items()]
        outputs = await ctx.submit(jobs, disconnected, "texts")
        results = [
            LengthResult(tokens=n, label="long" if n >= LONG else "short")
            for _, n in scatter(groups, outputs)
        ]
        return LengthResponse(model=",".join(groups), results=results)


router = APIRouter()


@router.post("/length", response_model=LengthResponse)
async def length(body: LengthRequest, service: ServiceDep, disconnected: DisconnectDep) -> LengthResponse:
    return await service.answer(LengthTask.name, body, disconnected)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
async def served(app_checkpoint_dir: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = Settings(checkpoint_dir=app_checkpoint_dir)
    service = Service(settings, Metrics(), [*default_tasks(), LengthTask()])
    app = create_app(settings, service, extra_routers=[router])
    async with (
        LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
    ):
        await wait_ready(client)
        yield app, client


async def test_the_toy_task_answers_over_http(
    served: tuple[FastAPI, httpx.AsyncClient], app_checkpoint_dir: Path
) -> None:
    _, client = served
    texts = ["a cat", "the movie was long and the acting was not very good at all"]
    r = await client.post("/length", json={"texts": texts})
    assert r.status_code == 200, r.text
    tokenizer = load_checkpoint(app_checkpoint_dir / "sentiment-en").tokenizer
    want = [len(tokenizer.encode(t)) for t in texts]
    assert r.json() == {
        "model": "sentiment-en",
        "results": [{"tokens": n, "label": "long" if n >= LONG else "short"} for n in want],
    }
    assert want[0] < LONG <= want[1]  # both labels are exercised


async def test_the_toy_task_runs_through_the_shared_batchers(
    served: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    """Concurrent requests queue in the batcher the shared machinery made from its BatchSpec, admitted
    against its model's queue, and each gets its own items' outputs."""
    app, client = served
    service: Service = app.state.service
    handler: LengthHandler = service.tasks["length"].handlers["sentiment-en"]
    handler.batches.clear()
    texts = [" ".join(["word"] * i) for i in range(1, 17)]
    answers = await asyncio.gather(*(client.post("/length", json={"texts": [t]}) for t in texts))
    assert [a.status_code for a in answers] == [200] * 16
    assert [a.json()["results"][0]["tokens"] for a in answers] == [
        len(handler.tokenizer.encode(t)) for t in texts
    ]
    assert sum(handler.batches) == 16
    assert ("length", service.life.registry.entries["sentiment-en"].key, None) in service.pool  # type: ignore[union-attr]
    await eventually(lambda: service.queues.depth("sentiment-en") == 0)


async def test_the_toy_task_gets_the_shared_errors(served: tuple[FastAPI, httpx.AsyncClient]) -> None:
    """Its schema's 422, the registry's 404, and the built-in routes beside it."""
    _, client = served
    assert (await client.post("/length", json={"texts": []})).status_code == 422
    r = await client.post("/length", json={"texts": ["a"], "model": "nope"})
    assert r.status_code == 404, r.text
    assert "no sentiment model named 'nope'" in r.json()["detail"]
    assert (await client.post("/sentiment", json={"text": "a cat"})).status_code == 200
    models = (await client.get("/models")).json()["models"]
    assert {m["name"]: m["status"] for m in models}["sentiment-en"] == "ready"


async def test_the_toy_task_through_the_model_process(sentiment_only_dir: Path, tmp_path: Path) -> None:
    """The multi-process layout in one event loop: the model process's Engine (its Service with the toy
    task) and an HTTP process's RemoteService over a Unix socket; the toy's answer crosses the channel as
    the built-in tasks' do, the same as in one process."""
    settings = Settings(checkpoint_dir=sentiment_only_dir)
    engine = Engine(Service(settings, Metrics(), [*default_tasks(), LengthTask()]), http_workers=1)
    stop, path = asyncio.Event(), str(tmp_path / "engine.sock")
    serving = asyncio.create_task(engine.serve(path, stop))
    remote = RemoteService(settings, Metrics(), path)
    app = create_app(settings, remote, extra_routers=[router])
    texts = ["a cat", "the movie was long and the acting was not very good at all"]
    try:
        async with (
            LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
        ):
            await wait_ready(client)
            r = await client.post("/length", json={"texts": texts})
            assert r.status_code == 200, r.text
            local = await engine.service.answer("length", LengthRequest(texts=texts))
            assert r.json() == local.model_dump()
            assert (await client.post("/length", json={"texts": ["a"], "model": "nope"})).status_code == 404
    finally:
        stop.set()
        await serving

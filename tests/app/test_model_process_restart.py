"""Issue 43: a model process that dies leaves the rotation and its restarted successor rejoins. In one event
loop: an HTTP process's RemoteService and Engines over Unix sockets, an Engine stopped (its channels close,
as a death's do) and a new one started on the same socket path. The same across real processes, with the
supervisor's restart and its bound: tests/app/test_process_faults.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.core.metrics import Metrics
from app.core.settings import Settings
from app.main import create_app
from app.parallel.engine import Engine
from app.parallel.remote import RemoteService
from app.parallel.shares import model_settings
from app.parallel.supervisor import Deaths
from app.serving.service import Service
from tests.app.conftest import eventually, wait_ready


def test_more_deaths_than_the_limit_within_the_window_are_a_crash_loop() -> None:
    deaths = Deaths(3, window_s=60.0)
    assert [deaths.add(t) for t in (0.0, 10.0, 20.0)] == [False] * 3
    assert deaths.add(30.0)  # a fourth within 60 s
    deaths = Deaths(3, window_s=60.0)
    assert not any(deaths.add(t) for t in (0.0, 40.0, 80.0, 120.0, 160.0))  # spread out: never
    assert len(deaths) == 2  # those of the last 60 s


class Processes:
    """`n` Engines on their socket paths, each stoppable alone (a death, as the HTTP process sees it) and
    startable again on the same path (its restart)."""

    def __init__(self, settings: Settings, tmp_path: Path, n: int) -> None:
        self.settings, self.n = settings, n
        self.paths = [str(tmp_path / f"model-{i}.sock") for i in range(n)]
        self.engines: list[Engine] = []
        self.stops: list[asyncio.Event] = []
        self.serving: list[asyncio.Task[None]] = []
        for i in range(n):
            self.start(i)

    def start(self, i: int) -> None:
        engine = Engine(Service(model_settings(self.settings, i, self.n, None), Metrics()), 1)
        stop = asyncio.Event()
        task = asyncio.create_task(engine.serve(self.paths[i], stop))
        if i < len(self.engines):
            self.engines[i], self.stops[i], self.serving[i] = engine, stop, task
        else:
            self.engines.append(engine)
            self.stops.append(stop)
            self.serving.append(task)

    async def end(self, i: int) -> None:
        self.stops[i].set()
        await self.serving[i]

    async def close(self) -> None:
        for stop in self.stops:
            stop.set()
        await asyncio.gather(*self.serving)


@asynccontextmanager
async def serving(
    sentiment_only_dir: Path, tmp_path: Path, n: int
) -> AsyncIterator[tuple[httpx.AsyncClient, Processes, RemoteService]]:
    settings = Settings(checkpoint_dir=sentiment_only_dir, warmup=False, torchscript=False)
    processes = Processes(settings, tmp_path, n)
    remote = RemoteService(settings, Metrics(), processes.paths)
    app = create_app(settings, remote)
    try:
        async with (
            LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
        ):
            await wait_ready(client)
            yield client, processes, remote
    finally:
        await processes.close()


def batches(engine: Engine) -> float:
    """The batches `engine` has run (its own metrics)."""
    value = engine.service.metrics.registry.get_sample_value(
        "transformer_serving_batch_size_count", {"model": "sentiment-en"}
    )
    return value or 0.0


@pytest.mark.anyio
async def test_a_dead_model_process_of_two_leaves_the_rotation_and_its_successor_rejoins(
    sentiment_only_dir: Path, tmp_path: Path
) -> None:
    async with serving(sentiment_only_dir, tmp_path, 2) as (client, processes, remote):
        await processes.end(1)
        await eventually(lambda: not remote.pool.joined[1])
        r = await client.get("/ready")  # 200: the other serves
        assert r.status_code == 200, r.json()
        assert r.json()["reason"] == (
            "1 of 2 model processes answering: the model process is restarting (model process 2 of 2)"
        )
        for _ in range(4):
            assert (await client.post("/sentiment", json={"text": "a good film"})).status_code == 200
        processes.start(1)  # the supervisor's restart: the same path
        await eventually(lambda: remote.pool.joined[1])
        r = await client.get("/ready")
        assert (r.status_code, r.json().get("reason")) == (200, None)
        # back in the rotation: ties take turns, so of a few requests one at a time some run there
        for _ in range(6):
            assert (await client.post("/sentiment", json={"text": "a good film"})).status_code == 200
        assert batches(processes.engines[1]) > 0


@pytest.mark.anyio
async def test_the_only_model_process_dead_answers_503_until_its_successor_is_ready(
    sentiment_only_dir: Path, tmp_path: Path
) -> None:
    async with serving(sentiment_only_dir, tmp_path, 1) as (client, processes, remote):
        await processes.end(0)
        await eventually(lambda: not remote.pool.joined[0])
        r = await client.get("/ready")
        assert (r.status_code, r.json()["status"]) == (503, "loading"), r.json()
        assert r.json()["reason"] == "the model process is restarting"
        r = await client.post("/sentiment", json={"text": "a good film"})
        assert (r.status_code, r.headers.get("Retry-After")) == (503, "1"), r.text
        processes.start(0)
        await wait_ready(client)
        assert remote.pool.joined == [True]
        assert (await client.post("/sentiment", json={"text": "a good film"})).status_code == 200

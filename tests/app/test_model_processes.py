"""Several model processes (APP_MODEL_PROCESSES): each one's share of the cores and of the admission limits,
and an HTTP process's RemoteService spreading requests over them, in one event loop (two Engines over Unix
sockets): the limits stay the server's, /ready and /metrics cover every model process. The same across real
processes: tests/app/test_parallel.py, test_process_faults.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from asgi_lifespan import LifespanManager

import app.core.settings.machine
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.main import create_app
from app.parallel.engine import Engine
from app.parallel.remote import RemoteService
from app.parallel.shares import core_slices, model_settings, share
from app.serving.service import Service
from app.tasks.handlers import TranslationHandler
from app.tasks.sentiment import SentimentHandler
from tests.app.conftest import eventually, wait_ready


@pytest.mark.parametrize("total", [1, 2, 3, 5, 1024, 200_000])
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_shares_add_up_to_the_setting(total: int, parts: int) -> None:
    shares = [share(total, parts, i) for i in range(parts)]
    assert sum(shares) == total
    assert max(shares) - min(shares) <= 1


def test_each_model_process_gets_its_part_of_every_limit() -> None:
    s = Settings(device="cpu", max_queue=1001, max_queue_work=200_001, max_decode_queues=63)
    parts = [model_settings(s, i, 3, cores=2) for i in range(3)]
    for name in ("max_queue", "max_queue_work", "max_decode_queues"):
        assert sum(getattr(p, name) for p in parts) == getattr(s, name), name
    # on 2 cores of its own: what auto gives a 2-core server, without HTTP processes on them
    assert {(p.inference_workers_count(), p.inference_threads()) for p in parts} == {(2, 1)}
    assert model_settings(s, 0, 2, cores=1).inference_workers_count() == 1
    assert model_settings(s, 0, 1, cores=None) is s  # one model process: the settings as they are


def test_core_slices_are_disjoint_and_leave_the_http_processes_theirs() -> None:
    cores = list(range(16))
    slices = core_slices(cores, 4, http_workers=4)
    assert slices == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]  # 12-15: the HTTP processes'
    assert core_slices([0, 1], 2, http_workers=1) == [[0], [1]]
    assert core_slices([0, 1], 2, http_workers=2) == [[0], [1]]  # too few cores to set any aside
    assert core_slices([0, 1], 3, http_workers=1) == [[0], [1], [0]]
    assert core_slices(list(range(7)), 2, http_workers=2) == [[0, 1, 2], [3, 4]]


@pytest.mark.parametrize(("cores", "http", "model"), [(2, 1, 1), (4, 1, 1), (16, 4, 4), (64, 8, 4)])
def test_model_processes_follow_the_cores_and_the_limits(
    monkeypatch: pytest.MonkeyPatch, cores: int, http: int, model: int
) -> None:
    """One below 8 cores; from 8, one per 2 cores left after the HTTP processes, as many as the default
    limits can be split between (APP_MAX_QUEUE_WORK / APP_MAX_WORK = 4)."""
    monkeypatch.setattr(app.core.settings.machine, "usable_cores", lambda: cores)
    s = Settings(device="cpu")
    assert (s.http_workers_count(), s.model_processes_count()) == (http, model)
    roomy = Settings(device="cpu", max_queue_work=10_000_000)
    assert roomy.model_processes_count() == (1 if cores < 8 else min(16, (cores - http) // 2))
    assert Settings(device="cpu", model_processes=3).model_processes_count() == 3


def test_cuda_runs_two_model_processes_per_gpu_as_the_limits_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    """From 8 cores (several HTTP processes): below, one process serves HTTP and models alike."""
    monkeypatch.setattr(app.core.settings.machine, "torch_gpu_build", lambda: True)  # a CUDA machine's torch
    monkeypatch.setattr(Settings, "torch_device", lambda self: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(app.core.settings.machine, "usable_cores", lambda: 4)
    assert Settings().model_processes_count() == 2
    monkeypatch.setattr(app.core.settings.machine, "usable_cores", lambda: 16)
    assert Settings().model_processes_count() == 4
    # 3 GPUs: 6 shares of APP_MAX_QUEUE_WORK=200,000 would be below APP_MAX_WORK=50,000: one each
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert Settings().model_processes_count() == 3
    assert Settings(max_queue_work=300_000).model_processes_count() == 6
    monkeypatch.setattr(Settings, "torch_device", lambda self: torch.device("cuda", 1))
    assert Settings(device="cuda:1").model_processes_count() == 2  # that GPU, twice


def test_a_split_that_could_never_admit_a_request_is_refused() -> None:
    s = Settings(model_processes=5)
    error = s.split_limits_error(5)
    assert error is not None
    assert "APP_MAX_QUEUE_WORK=200,000 out in parts of 40,000" in error
    assert "at least 250,000" in error
    assert Settings(max_queue=2).split_limits_error(3) == (
        "APP_MODEL_PROCESSES=3 needs APP_MAX_QUEUE of at least 3 (one per model process), got 2"
    )
    assert s.split_limits_error(4) is None


# --- an HTTP process and two model processes, in one event loop ------------------------------------------


@asynccontextmanager
async def two_engines(
    settings: Settings, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, list[Engine], RemoteService]]:
    """Two Engines, each with its share of `settings`, and an app whose RemoteService talks to both."""
    engines = [Engine(Service(model_settings(settings, i, 2, None), Metrics()), 1) for i in range(2)]
    stop, paths = asyncio.Event(), [str(tmp_path / f"model-{i}.sock") for i in range(2)]
    serving = [asyncio.create_task(e.serve(p, stop)) for e, p in zip(engines, paths, strict=True)]
    remote = RemoteService(settings, Metrics(), paths)
    app = create_app(settings, remote)
    try:
        async with (
            LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
        ):
            await wait_ready(client)
            yield client, engines, remote
    finally:
        stop.set()
        await asyncio.gather(*serving)


QUEUE = 5  # APP_MAX_QUEUE: shares of 3 and 2


@pytest.mark.anyio
async def test_admitted_work_never_exceeds_the_setting(
    sentiment_only_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches held on the workers (one each), requests sent one by one: each is admitted where there is
    room (after a 429 from a full one, the other) until the server holds APP_MAX_QUEUE queued items, one
    per worker besides; then 429 from every one."""
    settings = Settings(
        checkpoint_dir=sentiment_only_dir,
        max_queue=QUEUE,
        max_batch_size=1,
        inference_workers=1,
        warmup=False,
        torchscript=False,
    )
    gate, entered = threading.Event(), []
    run = SentimentHandler.run

    def held_run(self: SentimentHandler, items: Any) -> Any:
        entered.append(len(items))
        gate.wait(30)
        return run(self, items)

    async with two_engines(settings, tmp_path) as (client, engines, _):
        monkeypatch.setattr(SentimentHandler, "run", held_run)

        def held() -> int:  # items on a worker or queued, in both model processes
            return len(entered) + sum(e.service.queues.depth("sentiment-en") for e in engines)

        sent: list[asyncio.Task[httpx.Response]] = []
        try:
            for k in range(QUEUE + 2 + 3):
                sent.append(asyncio.create_task(client.post("/sentiment", json={"text": f"a film {k}"})))
                # settled: admitted (held) or refused (answered)
                await eventually(lambda: held() + sum(t.done() for t in sent) == len(sent))
                assert held() <= QUEUE + 2  # never more than the server's limit (and the two workers)
            assert held() == QUEUE + 2
            refused = [t.result() for t in sent if t.done()]
            assert len(refused) == 3
            for r in refused:
                assert r.status_code == 429, r.text
                assert "every one of the 2 model processes is full" in r.json()["detail"]
                assert int(r.headers["retry-after"]) >= 1
        finally:
            gate.set()
        answers = await asyncio.gather(*sent)
        assert sum(r.status_code == 200 for r in answers) == QUEUE + 2


@pytest.mark.anyio
async def test_ready_and_metrics_cover_both_model_processes(sentiment_only_dir: Path, tmp_path: Path) -> None:
    settings = Settings(checkpoint_dir=sentiment_only_dir, warmup=False, torchscript=False)
    async with two_engines(settings, tmp_path) as (client, engines, _):
        for _ in range(4):  # spread over both: the one with fewer items in flight, ties taking turns
            assert (
                await client.post("/sentiment", json={"texts": ["a good film", "bad"]})
            ).status_code == 200
        text = (await client.get("/metrics")).text

        def value(series: str) -> float:
            return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(series + " "))

        assert value('transformer_serving_processes{role="model"}') == 2
        assert value('transformer_serving_processes{role="http"}') == 1
        assert value("transformer_serving_models_loaded") == 1  # the server's models, not one per process
        assert value('transformer_serving_batch_size_sum{model="sentiment-en"}') == 8
        assert (
            value('transformer_serving_http_requests_total{method="POST",route="/sentiment",status="200"}')
            == 4
        )
        assert text.count("# TYPE transformer_serving_batch_size histogram") == 1
        ran = [
            e.service.metrics.registry.get_sample_value(
                "transformer_serving_batch_size_sum", {"model": "sentiment-en"}
            )
            for e in engines
        ]
        assert ran == [4, 4]  # two requests each

        # one model process shutting down: the server's /ready says so, naming it
        engines[1].draining = True  # pushed to the HTTP process on its next state poll
        r = await _ready_until(client, 503)
        assert r.json()["status"] == "shutting_down"
        assert r.json()["reason"] == "the server is shutting down (model process 2 of 2)"


@pytest.mark.anyio
async def test_a_model_runs_its_graphs_once_every_model_process_has_built_them(
    two_models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /models gives each model's graphs the least along of any model process: "building" while one
    model process still builds them (the other's pushed "ready" already arrived), "ready" after the last."""
    gates: dict[int, threading.Event] = {}  # per handler (id): its compile waits for it
    compile_ = TranslationHandler.compile

    def held(self: TranslationHandler) -> None:
        assert gates.setdefault(id(self), threading.Event()).wait(60)
        compile_(self)

    monkeypatch.setattr(TranslationHandler, "compile", held)
    settings = Settings(checkpoint_dir=two_models_dir, warmup=False)
    async with two_engines(settings, tmp_path) as (client, engines, remote):

        async def graphs() -> dict[str, str]:
            return {m["name"]: m["graphs"] for m in (await client.get("/models")).json()["models"]}

        def told(i: int) -> str | None:  # what model process i last told the HTTP process
            state = remote.pool.states[i]
            return None if state is None else next(m.graphs for m in state[1] if m.name == "translate-fr-en")

        first, second = (e.service.tasks["translation"].handlers["translate-fr-en"] for e in engines)
        await eventually(lambda: {id(first), id(second)} <= gates.keys())
        assert await graphs() == {
            "sentiment-en": "ready",
            "translate-fr-en": "building",
        }  # a classifier's: at load
        gates[id(first)].set()
        await eventually(lambda: told(0) == "ready")  # model process 1's word arrived; 2 still builds
        assert told(1) == "building"
        assert (await graphs())["translate-fr-en"] == "building"
        gates[id(second)].set()
        await eventually(lambda: told(1) == "ready")
        assert (await graphs())["translate-fr-en"] == "ready"
        assert first.compiled
        assert second.compiled


async def _ready_until(client: httpx.AsyncClient, status: int) -> httpx.Response:
    loop = asyncio.get_running_loop()
    end = loop.time() + 10
    while (r := await client.get("/ready")).status_code != status:
        assert loop.time() < end, r.json()
        await asyncio.sleep(0.01)
    return r


@pytest.mark.anyio
async def test_a_model_process_builds_no_language_detector_until_asked(app_checkpoint_dir: Path) -> None:
    """Its HTTP processes detect languages: a model process's Service (detector=False) is ready without a
    detector, and builds one only if a task calls detect there (a plugin's whole answer), answering as the
    detector of one process does."""
    settings = Settings(checkpoint_dir=app_checkpoint_dir, warmup=False, torchscript=False)
    model_side = Service(settings, Metrics(), detector=False)
    app = create_app(settings, model_side)
    async with (
        LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
    ):
        await wait_ready(client)
        assert model_side.life.detector is None
        r = await client.post("/detect", json={"texts": ["Où est la gare ?", "Where is the station?"]})
        assert r.status_code == 200, r.text
        assert [x["language"] for x in r.json()["results"]] == ["fr", "en"]
        assert model_side.life.detector is not None


class _OtherHttpProcess:
    """The model process's end of a second HTTP process's channel, as far as its state pushes and its
    shutdown go."""

    def note(self, method: str, *args: Any) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_hello_answered_late_never_overwrites_a_newer_state(
    sentiment_only_dir: Path, tmp_path: Path
) -> None:
    """An HTTP process says hello to every model process at once and applies their replies when all have
    answered. A model process that answered first then pushes a newer state (here: the second HTTP process
    it waits for came up, so it is ready); its hello reply, older, must not replace that state, or this HTTP
    process would say "1 of 2 HTTP processes up" for good (a model process pushes only changes)."""
    settings = Settings(checkpoint_dir=sentiment_only_dir, warmup=False, torchscript=False)
    engines = [
        Engine(Service(model_settings(settings, i, 2, None), Metrics()), n) for i, n in ((0, 1), (1, 2))
    ]
    late, hello = asyncio.Event(), engines[0]._hello

    async def late_hello(channel: Any, pid: int) -> Any:
        await late.wait()
        return await hello(channel, pid)

    engines[0]._hello = late_hello  # type: ignore[method-assign]
    stop, paths = asyncio.Event(), [str(tmp_path / f"model-{i}.sock") for i in range(2)]
    serving = [asyncio.create_task(e.serve(p, stop)) for e, p in zip(engines, paths, strict=True)]
    remote = RemoteService(settings, Metrics(), paths)
    starting = asyncio.create_task(remote.start())
    try:
        await eventually(lambda: engines[1].service.readiness().status == "ready" and engines[1]._up() == 1)
        await eventually(lambda: (s := remote.pool.states[1]) is not None and s[0].status == "loading")
        await engines[1]._hello(_OtherHttpProcess(), 2)  # type: ignore[arg-type]
        await eventually(lambda: (s := remote.pool.states[1]) is not None and s[0].status == "ready")
        late.set()
        await starting
        state = remote.pool.states[1]
        assert state is not None
        assert (state[0].status, state[0].reason) == ("ready", None)
    finally:
        late.set()
        await remote.stop()
        stop.set()
        await asyncio.gather(*serving)

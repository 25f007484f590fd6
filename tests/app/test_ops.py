"""Operations conventions: X-Request-ID on every answer and log record, the access line in text and JSON,
process metrics and build_info under one prefix, and scraping /metrics with APP_API_KEY set."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi import FastAPI

from app import __version__
from app.core.logs import JsonFormatter, RequestIdFilter, TextFormatter
from app.core.metrics import NAMESPACE
from app.core.settings import REPO_ROOT, Settings, SettingsError, load_settings
from app.edge.gate import new_id
from app.tasks.sentiment import ClassifierItem, SentimentHandler
from bench.server import free_port, server_env, stop, wait_ready
from tests.app.conftest import EAGER, eventually, serve
from tests.app.test_concurrency import SLOW, Held, queued

pytestmark = pytest.mark.anyio
HEX_ID = re.compile(r"[0-9a-f]{32}")  # a generated id: uuid4 hex
SENTIMENT = {"texts": ["a good film", "awful"]}


def generated(r: httpx.Response) -> bool:
    return HEX_ID.fullmatch(r.headers.get("x-request-id", "")) is not None


# --- X-Request-ID ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fast_path", [True, False])
async def test_request_id_is_echoed_or_generated_on_both_paths(
    sentiment_only_dir: Path, fast_path: bool
) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=sentiment_only_dir, fast_path=fast_path)) as (
        _,
        client,
    ):
        for method, path, body, status in (
            ("POST", "/sentiment", SENTIMENT, 200),  # the lean path when fast_path, else FastAPI
            ("POST", "/sentiment", {"text": ""}, 422),
            ("GET", "/health", None, 200),
            ("GET", "/no-such-route", None, 404),
        ):
            sent = await client.request(method, path, json=body, headers={"X-Request-ID": "req-42.a:b"})
            assert (sent.status_code, sent.headers["x-request-id"]) == (status, "req-42.a:b"), path
            new = [await client.request(method, path, json=body) for _ in range(2)]
            assert all(generated(r) for r in new), path
            assert new[0].headers["x-request-id"] != new[1].headers["x-request-id"]


@pytest.mark.parametrize(
    "bad",
    ["x" * 129, "two words", "a\tb", "<script>", "id;drop", "é".encode(), ""],
    ids=["too-long", "space", "tab", "markup", "semicolon", "non-ascii", "empty"],
)
async def test_an_insane_request_id_is_replaced(client: httpx.AsyncClient, bad: str | bytes) -> None:
    r = await client.post("/sentiment", json=SENTIMENT, headers={"X-Request-ID": bad})
    assert r.status_code == 200
    assert generated(r)


async def test_the_longest_sane_request_id_is_kept(client: httpx.AsyncClient) -> None:
    sane = "A-z0.9_:+/=@" + "x" * 116  # 128 characters
    r = await client.get("/health", headers={"X-Request-ID": sane})
    assert r.headers["x-request-id"] == sane


async def test_answers_of_the_gate_and_the_service_carry_the_request_id(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {"X-Request-ID": "gate-1"}
    too_large = await client.post(
        "/sentiment", content=b" " * 1_048_577, headers=headers | {"content-type": "application/json"}
    )
    assert (too_large.status_code, too_large.headers["x-request-id"]) == (413, "gate-1")
    monkeypatch.setattr(app.state.service.life, "status", "loading")  # as before the models are loaded
    monkeypatch.setattr(app.state.service.life, "serving", False)
    unavailable = await client.post("/sentiment", json=SENTIMENT, headers=headers)
    assert (unavailable.status_code, unavailable.headers["x-request-id"]) == (503, "gate-1")

    def broken() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.state.service, "models", broken)
    failed = await client.get("/models", headers=headers)
    assert (failed.status_code, failed.headers["x-request-id"]) == (500, "gate-1")


async def test_401_and_429_carry_the_request_id(
    sentiment_only_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(monkeypatch)
    settings = Settings(
        checkpoint_dir=sentiment_only_dir, api_key="k", max_queue=1, max_batch_size=1, inference_workers=1
    )
    async with serve(settings) as (app, client):
        r = await client.post("/sentiment", json=SENTIMENT, headers={"X-Request-ID": "no-key"})
        assert (r.status_code, r.headers["x-request-id"]) == (401, "no-key")
        key = {"X-API-Key": "k"}
        running = asyncio.ensure_future(client.post("/sentiment", json={"text": SLOW}, headers=key))
        await asyncio.to_thread(held.running.wait, 5)
        waiting = asyncio.ensure_future(client.post("/sentiment", json={"text": "queued"}, headers=key))
        await eventually(lambda: queued(app) == 1)
        r = await client.post("/sentiment", json={"text": "one more"}, headers=key | {"X-Request-ID": "full"})
        assert (r.status_code, r.headers["x-request-id"]) == (429, "full")
        held.release.set()
        assert [(await f).status_code for f in (running, waiting)] == [200, 200]


async def test_cors_pages_may_send_and_read_the_request_id(sentiment_only_dir: Path) -> None:
    settings = Settings(**EAGER, checkpoint_dir=sentiment_only_dir, cors_origins=["http://ui.example"])
    async with serve(settings) as (_, client):
        origin = {"Origin": "http://ui.example"}
        preflight = await client.options(
            "/sentiment",
            headers=origin
            | {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-request-id"},
        )
        assert preflight.status_code == 200
        r = await client.post("/sentiment", json=SENTIMENT, headers=origin)
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()


# --- logs --------------------------------------------------------------------------------------------------


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """caplog with the request-id filter on its handler, as python -m app puts it on its own."""
    caplog.handler.addFilter(RequestIdFilter())
    caplog.set_level(logging.INFO)
    return caplog


async def test_the_access_line_carries_the_request_id_model_and_batch_size(
    make_settings: Callable[..., Settings], records: pytest.LogCaptureFixture
) -> None:
    async with serve(make_settings(access_log=True)) as (_, client):
        # "ready: ...", "graphs ready in ...": start-up's, no request's
        assert [r.request_id for r in records.records if r.name == "app.runtime.lifecycle"] == [None, None]
        records.clear()
        headers = {"X-Request-ID": "access-1"}
        assert (await client.post("/sentiment", json=SENTIMENT, headers=headers)).status_code == 200
        assert (await client.get("/health", headers={"X-Request-ID": "access-2"})).status_code == 200
        translate = {"text": "le chat. le chien !", "source_lang": "fr", "beam_size": 1}
        r = await client.post("/translate", json=translate, headers={"X-Request-ID": "access-3"})
        assert r.status_code == 200
    access = {r.request_id: r for r in records.records if r.name == "app.access"}
    sentiment, health, translated = access["access-1"], access["access-2"], access["access-3"]
    assert sentiment.getMessage().startswith("POST /sentiment 200 ")
    fields = ("route", "method", "status", "model", "batch_size")
    assert [getattr(sentiment, f) for f in fields] == ["/sentiment", "POST", 200, "sentiment-en", 2]
    assert sentiment.latency_ms > 0
    assert [getattr(translated, f) for f in fields] == ["/translate", "POST", 200, "translate-fr-en", 2]
    assert (health.route, health.status, getattr(health, "model", None)) == ("/health", 200, None)

    line = json.loads(JsonFormatter().format(sentiment))  # one JSON object per record
    assert line.items() >= {
        "level": "INFO", "logger": "app.access", "request_id": "access-1", "route": "/sentiment",
        "method": "POST", "status": 200, "model": "sentiment-en", "batch_size": 2,
    }.items()  # fmt: skip
    assert line["message"] == sentiment.getMessage()
    assert line["latency_ms"] == sentiment.latency_ms
    assert datetime.fromisoformat(line["time"]).utcoffset() is not None  # ISO 8601 with its offset
    assert "model" not in json.loads(JsonFormatter().format(health))


async def test_no_access_line_by_default(
    client: httpx.AsyncClient, records: pytest.LogCaptureFixture
) -> None:
    await client.get("/health")
    assert [r for r in records.records if r.name == "app.access"] == []


async def test_a_failed_batch_logs_the_ids_of_its_requests(
    sentiment_only_dir: Path, monkeypatch: pytest.MonkeyPatch, records: pytest.LogCaptureFixture
) -> None:
    """Two requests queue behind a held batch and run as one batch, which fails: the batch's log lines (in
    the event loop and in the worker thread) name both requests, and each request's 500 carries its id."""
    held = Held(monkeypatch)
    hold_run = SentimentHandler.run

    def run(handler: SentimentHandler, batch: list[ClassifierItem]) -> list[list[float]]:
        if len(batch) == 2:
            logging.getLogger("tests.worker").warning("running %d items", len(batch))
            raise RuntimeError("boom")
        return hold_run(handler, batch)

    monkeypatch.setattr(SentimentHandler, "run", run)
    settings = Settings(**EAGER, checkpoint_dir=sentiment_only_dir, inference_workers=1)
    async with serve(settings) as (app, client):
        blocker = asyncio.ensure_future(client.post("/sentiment", json={"text": SLOW}))
        await asyncio.to_thread(held.running.wait, 5)
        sent = [
            asyncio.ensure_future(client.post("/sentiment", json={"text": t}, headers={"X-Request-ID": i}))
            for t, i in (("first", "batch-a"), ("second", "batch-b"))
        ]
        await eventually(lambda: queued(app) == 2)
        held.release.set()
        failed = [await f for f in sent]
        assert (await blocker).status_code == 200
    assert [(r.status_code, r.headers["x-request-id"]) for r in failed] == [
        (500, "batch-a"),
        (500, "batch-b"),
    ]
    [worker] = [r for r in records.records if r.name == "tests.worker"]
    [batch] = [r for r in records.records if r.getMessage().startswith("batch of 2 item(s) failed")]
    assert worker.request_id == batch.request_id
    assert sorted(batch.request_id.split(",")) == ["batch-a", "batch-b"]
    assert worker.threadName.startswith("inference")


def test_text_and_json_lines_of_records_inside_and_outside_requests() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        record = logging.LogRecord(
            "app.x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info()
        )
    RequestIdFilter().filter(record)  # outside any request
    text = TextFormatter().format(record)
    assert text.splitlines()[0].endswith(" ERROR app.x [-]: failed here")
    assert "ValueError: bad" in text
    line = json.loads(JsonFormatter().format(record))
    assert (line["request_id"], line["message"]) == (None, "failed here")
    assert line["exception"].endswith("ValueError: bad")
    record.request_id = "r-1"
    assert TextFormatter().format(record).splitlines()[0].endswith(" ERROR app.x [r-1]: failed here")
    assert json.loads(JsonFormatter().format(record))["request_id"] == "r-1"


@pytest.mark.slow
def test_python_m_app_logs_json_lines(sentiment_only_dir: Path) -> None:
    """APP_LOG_FORMAT=json: every line the server writes (uvicorn's too) is one JSON object; the access
    line has the request's fields."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "APP_CHECKPOINT_DIR": str(sentiment_only_dir), "APP_PORT": str(port), "APP_LOG_FORMAT": "json",
        "APP_ACCESS_LOG": "true", "APP_WARMUP": "false", "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "app"], env=server_env(env), cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_ready(proc, url)
        r = httpx.post(f"{url}/sentiment", json=SENTIMENT, headers={"X-Request-ID": "json-1"}, timeout=30)
        assert r.status_code == 200
    finally:
        output = stop(proc)
    lines = [json.loads(line) for line in output.splitlines()]  # raises on a line that is not JSON
    assert {"uvicorn.error", "app.runtime.lifecycle", "app.access"} <= {line["logger"] for line in lines}
    [access] = [line for line in lines if line["request_id"] == "json-1"]
    assert access | {"time": None, "latency_ms": None} == {
        "time": None, "level": "INFO", "logger": "app.access", "message": access["message"],
        "request_id": "json-1", "route": "/sentiment", "method": "POST", "status": 200, "latency_ms": None,
        "model": "sentiment-en", "batch_size": 2,
    }  # fmt: skip


# --- /metrics ----------------------------------------------------------------------------------------------


def families(metrics: str) -> dict[str, str]:
    """Metric family name -> type, from the # TYPE lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", metrics, re.MULTILINE))


async def test_process_metrics_and_one_prefix(client: httpx.AsyncClient) -> None:
    metrics = (await client.get("/metrics")).text
    names = families(metrics)
    for name in (
        "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info",
        "python_gc_objects_collected_total", "python_gc_collections_total",
    ):  # fmt: skip
        assert name in names, name
    assert float(re.search(r"^process_resident_memory_bytes (\S+)$", metrics, re.MULTILINE)[1]) > 1e6  # type: ignore[index]
    ours = [n for n in names if not n.startswith(("process_", "python_"))]
    assert len(ours) >= 7
    assert [n for n in ours if not n.startswith(f"{NAMESPACE}_")] == []


async def test_build_info(client: httpx.AsyncClient) -> None:
    metrics = (await client.get("/metrics")).text
    [(labels, value)] = re.findall(rf"^{NAMESPACE}_build_info{{(.*)}} (\S+)$", metrics, re.MULTILINE)
    assert float(value) == 1
    python = ".".join(map(str, sys.version_info[:3]))
    assert dict(re.findall(r'(\w+)="([^"]*)"', labels)) == {
        "version": __version__, "torch": torch.__version__, "python": python, "device": "cpu",
        "dtype": "float32", "quantize": "none",
    }  # fmt: skip


SCRAPES: list[tuple[dict[str, Any], dict[str | None, int], dict[str | None, int]]] = [
    # settings, /metrics status by the key sent, /models status by the key sent
    ({"api_key": "main"}, {None: 401, "main": 200, "other": 401}, {None: 401, "main": 200}),
    (
        {"api_key": "main", "metrics_api_key": "scrape"},
        {None: 401, "main": 200, "scrape": 200, "other": 401},
        {None: 401, "main": 200, "scrape": 401},
    ),
    ({"api_key": "main", "metrics_public": True}, {None: 200, "other": 200}, {None: 401, "main": 200}),
    ({"metrics_api_key": "scrape"}, {None: 401, "scrape": 200, "other": 401}, {None: 200, "scrape": 200}),
]


@pytest.mark.parametrize(("settings", "scrape", "models"), SCRAPES, ids=["main", "both", "public", "metrics"])
async def test_metrics_scrape_with_a_key_set(
    sentiment_only_dir: Path,
    settings: dict[str, Any],
    scrape: dict[str | None, int],
    models: dict[str | None, int],
) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=sentiment_only_dir, **settings), ready=False) as (
        _,
        client,
    ):
        for path, expected in (("/metrics", scrape), ("/models", models)):
            for key, status in expected.items():
                for headers in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": str(key)}) if key else [{}]:
                    r = await client.get(path, headers=headers)
                    assert r.status_code == status, (path, key, headers)
                    if status == 200 and path == "/metrics":
                        assert f"{NAMESPACE}_http_requests_total" in r.text


def test_metrics_key_and_public_metrics_exclude_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_METRICS_PUBLIC", "true")
    monkeypatch.setenv("APP_METRICS_API_KEY", "sup3rsecret")
    with pytest.raises(SettingsError, match="APP_METRICS_PUBLIC") as e:
        load_settings()
    assert "sup3rsecret" not in str(e.value)
    monkeypatch.setenv("APP_METRICS_API_KEY", "")  # empty = unset
    assert load_settings().metrics_public


def test_new_request_ids_are_distinct_uuid4s() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for i in ids:
        u = uuid.UUID(i)
        assert (u.hex, u.version, u.variant) == (i, 4, uuid.RFC_4122)

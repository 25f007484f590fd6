"""One model that fails to load never takes the rest down silently (issue 34; Triton's --strict-readiness).

Beside sentiment-en and a good copy of the fr -> en translator: translate-fr-en with 96 corrupted bytes in its
weights (fails while loading) and sentiment-xx whose config.json is not JSON (fails at discovery). Both fail
the same way, and no response carries a filesystem path:
- APP_STRICT_READINESS=true (default): /ready 503 naming each failed model and its reason while the others
  say ready and serve; the failed model's pair stays its own and answers 503 saying why.
- false: /ready 200; /models and the metrics list the failed models and reasons; the pair goes to the next
  model in the routing order, which the log says once, as an error.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.core.settings import Settings
from tests.app.conftest import eventually, serve

pytestmark = pytest.mark.anyio
CORRUPTED = "translate-fr-en/model.safetensors: sha256 differs from the one recorded in config.json"
UNREADABLE = "sentiment-xx/config.json: not valid JSON"


@pytest.fixture(scope="module")
def broken_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_translator_checkpoint: Path,
) -> Path:
    root = tmp_path_factory.mktemp("broken")
    (root / "sentiment-en").symlink_to(tiny_sentiment_checkpoint, target_is_directory=True)
    (root / "translate-fr-en-copy").symlink_to(tiny_translator_checkpoint, target_is_directory=True)
    broken = shutil.copytree(tiny_translator_checkpoint, root / "translate-fr-en")
    weights = bytearray((broken / "model.safetensors").read_bytes())
    weights[-96:] = bytes(96)  # the same size, other bytes
    (broken / "model.safetensors").write_bytes(bytes(weights))
    (root / "sentiment-xx").mkdir()
    (root / "sentiment-xx" / "config.json").write_text("{")
    return root


async def started(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with serve(settings, ready=False) as (app, client):
        await eventually(lambda: app.state.service.life.serving)
        yield app, client


@pytest.fixture(scope="module")
async def strict(broken_dir: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async for pair in started(Settings(checkpoint_dir=broken_dir, warmup=False)):
        yield pair


@pytest.fixture(scope="module")
async def lenient(broken_dir: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async for pair in started(Settings(checkpoint_dir=broken_dir, warmup=False, strict_readiness=False)):
        yield pair


def no_path(response: httpx.Response, root: Path) -> None:
    assert str(root) not in response.text
    assert str(root.resolve()) not in response.text


async def test_strict_ready_is_503_naming_each_failure(
    strict: tuple[FastAPI, httpx.AsyncClient], broken_dir: Path
) -> None:
    r = await strict[1].get("/ready")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "failed"
    assert body["models"] == {
        "sentiment-en": "ready",
        "sentiment-xx": "failed",
        "translate-fr-en": "failed",
        "translate-fr-en-copy": "ready",
    }
    assert body["failed"]["translate-fr-en"].startswith(CORRUPTED)
    assert body["failed"]["sentiment-xx"].startswith(UNREADABLE)
    assert "translate-fr-en (" in body["reason"]
    assert "sentiment-xx (" in body["reason"]
    no_path(r, broken_dir)


async def test_strict_others_serve_and_the_failed_pair_says_why(
    strict: tuple[FastAPI, httpx.AsyncClient], broken_dir: Path
) -> None:
    client = strict[1]
    assert (await client.post("/sentiment", json={"text": "good"})).status_code == 200
    r = await client.post("/translate", json={"text": "le chat", "source_lang": "fr"})
    assert r.status_code == 503  # not silently answered by the copy
    assert r.json()["detail"].startswith(f"model translate-fr-en failed to load: {CORRUPTED}")
    no_path(r, broken_dir)
    r = await client.post(
        "/translate", json={"text": "le chat", "source_lang": "fr", "model": "translate-fr-en-copy"}
    )
    assert (r.status_code, r.json()["model"]) == (200, "translate-fr-en-copy")
    r = await client.post("/attention", json={"text": "le chat", "model": "translate-fr-en"})
    assert r.status_code == 503


async def test_lenient_ready_and_the_pair_goes_to_the_next_model(
    lenient: tuple[FastAPI, httpx.AsyncClient], broken_dir: Path
) -> None:
    client = lenient[1]
    r = await client.get("/ready")
    assert (r.status_code, r.json()["status"]) == (200, "ready")
    assert r.json()["failed"].keys() == {"translate-fr-en", "sentiment-xx"}
    r = await client.post("/translate", json={"text": "le chat", "source_lang": "fr"})
    assert (r.status_code, r.json()["model"]) == (200, "translate-fr-en-copy")
    r = await client.post(
        "/translate", json={"text": "le chat", "source_lang": "fr", "model": "translate-fr-en"}
    )
    assert r.status_code == 503
    models = {m["name"]: m for m in (await client.get("/models")).json()["models"]}
    assert models["translate-fr-en"]["status"] == "failed"
    assert models["translate-fr-en"]["reason"].startswith(CORRUPTED)
    assert models["translate-fr-en-copy"]["status"] == "ready"
    metrics = (await client.get("/metrics")).text
    assert 'models_failed{model="translate-fr-en",reason="' + CORRUPTED in metrics
    assert 'models_failed{model="sentiment-xx",reason="' + UNREADABLE in metrics
    no_path(r, broken_dir)


async def test_lenient_logs_the_new_route_once_as_an_error(
    broken_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="app.tasks.routing"):
        async for _ in started(Settings(checkpoint_dir=broken_dir, warmup=False, strict_readiness=False)):
            pass
    moved = [r for r in caplog.records if "its pairs now go to" in r.getMessage()]
    assert len(moved) == 1
    assert moved[0].levelno == logging.ERROR
    assert "fr-en -> translate-fr-en-copy" in moved[0].getMessage()

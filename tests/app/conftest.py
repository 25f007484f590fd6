"""App fixtures: one checkpoint directory holding the shared tiny checkpoints, settings, in-process clients."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from app.core.settings import Settings
from app.main import create_app
from model import Translator, save_checkpoint
from tests.conftest import tiny_translation_config

MULTI_LANG_IDS = {"en": 4, "fr": 5}  # start tokens of the multilingual test decoder (any in-vocab ids)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _no_app_env() -> Iterator[None]:
    """Tests build their settings explicitly: a developer's APP_* variables must not leak in."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("APP_"):
                mp.delenv(name)
        yield


@pytest.fixture(scope="session")
def multi_translator_checkpoint(
    tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> Path:
    """An untied de -> en/fr model whose decoder starts with a target-language token; 3 encoder layers and 2
    decoder layers (stacks of different depths, as the shipped fr-en and es-en: 4 and 3)."""
    torch.manual_seed(7)
    cfg = tiny_translation_config(
        tiny_vocab_size,
        n_layers=3,
        source_langs=("de",),
        target_langs=("en", "fr"),
        target_lang_ids=MULTI_LANG_IDS,
        tie_embeddings=False,
    )
    root = tmp_path_factory.mktemp("multi")
    return save_checkpoint(
        root / "translate-multi", Translator(cfg).eval(), tiny_tokenizer_path, dtype=torch.float32
    )


@pytest.fixture(scope="session")
def app_checkpoint_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_sentiment_ko_checkpoint: Path,
    tiny_translator_checkpoint: Path,
    multi_translator_checkpoint: Path,
) -> Path:
    """The app's APP_CHECKPOINT_DIR: symlinks to sentiment-en, sentiment-ko, translate-fr-en, translate-multi."""
    root = tmp_path_factory.mktemp("app-checkpoints")
    for ckpt in (
        tiny_sentiment_checkpoint,
        tiny_sentiment_ko_checkpoint,
        tiny_translator_checkpoint,
        multi_translator_checkpoint,
    ):
        (root / ckpt.name).symlink_to(ckpt, target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def sentiment_only_dir(tmp_path_factory: pytest.TempPathFactory, tiny_sentiment_checkpoint: Path) -> Path:
    """Just sentiment-en: quick to start for behaviour tests (backpressure, timeouts, failures)."""
    root = tmp_path_factory.mktemp("sentiment-only")
    (root / "sentiment-en").symlink_to(tiny_sentiment_checkpoint, target_is_directory=True)
    return root


@pytest.fixture
def make_settings(app_checkpoint_dir: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return Settings(**({"checkpoint_dir": app_checkpoint_dir} | overrides))

    return make


# For a module whose apps of its own test routes, limits or scheduling, not the models' graphs: eager models
# start without tracing (the traced graphs' parity is asserted by tests/model, by the batching and int8 parity
# tests, and through the shared app, which runs the defaults). Use as `Settings(**EAGER, ...)`, or override
# make_settings in the module with `eager_settings`.
EAGER: dict[str, Any] = {"torchscript": False}


def eager_settings(make: Callable[..., Settings]) -> Callable[..., Settings]:
    def make_eager(**overrides: Any) -> Settings:
        return make(**(EAGER | overrides))

    return make_eager


async def wait_ready(client: httpx.AsyncClient, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while (r := await client.get("/ready")).status_code != 200:
        assert r.json()["status"] != "failed", r.json()
        assert loop.time() < end, f"not ready after {timeout}s: {r.json()}"
        await asyncio.sleep(0.01)


async def wait_graphs(client: httpx.AsyncClient, timeout: float = 60.0) -> None:
    """Until GET /models lists no model whose graphs are pending or building (APP_TORCHSCRIPT_AFTER_READY)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        models = (await client.get("/models")).json()["models"]
        if not {"pending", "building"} & {m["graphs"] for m in models}:
            return
        assert loop.time() < end, f"graphs not built after {timeout}s: {models}"
        await asyncio.sleep(0.01)


async def eventually(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Return once condition() holds (checked every millisecond): a wait for a state, not for a time."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        assert loop.time() < end, f"not true within {timeout} s"
        await asyncio.sleep(0.001)


def json_post_scope(path: str, content_length: int) -> dict[str, Any]:
    """A raw ASGI scope of a JSON POST, for tests that drive the app's receive()/send() themselves."""
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [
            (b"host", b"test"), (b"content-type", b"application/json"),
            (b"content-length", str(content_length).encode()),
        ],
        "client": ("127.0.0.1", 1), "server": ("test", 80), "state": {},
    }  # fmt: skip


@asynccontextmanager
async def serve(
    settings: Settings, ready: bool = True, graphs: bool = True
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app with its lifespan running and an in-process httpx client (ready unless ready=False; and with
    its TorchScript graphs swapped in, unless graphs=False: tests then meet the graphs, as before ready)."""
    app = create_app(settings)
    async with (
        LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://test") as client,
    ):
        if ready:
            await wait_ready(client)
            if graphs:  # read where they are kept: GET /models may want an API key
                states = app.state.service.life.graphs
                await eventually(lambda: not {"pending", "building"} & set(states.values()), timeout=60)
        yield app, client


@pytest.fixture(scope="module")
async def shared(app_checkpoint_dir: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """One ready app for the read-only API tests of a module."""
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir)) as pair:
        yield pair


@pytest.fixture
def client(shared: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return shared[1]


@pytest.fixture
def app(shared: tuple[FastAPI, httpx.AsyncClient]) -> FastAPI:
    return shared[0]

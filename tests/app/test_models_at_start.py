"""APP_MODELS: the models a deployment names are pulled at start from a stand-in hub on localhost (each by
`python -m training pull --progress json`), /ready says how far, the models on disk serve meanwhile, and
each pulled model is then served; one that cannot be pulled fails alone."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from app.runtime.lifecycle import Lifecycle
from tests.app.conftest import EAGER, serve
from tests.app.test_parallel import serve as serve_processes
from tests.training.standin import Site
from tests.training.standin import serve as serve_site
from tests.training.test_pull import MAIN, REPO, hub_site, with_card

pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

FR = {"text": "le chat dort", "source_lang": "fr", "target_lang": "en"}


@pytest.fixture
def hub(tiny_marian_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """REPO on a stand-in hub (HF_ENDPOINT, which the pull's process inherits), with an empty cache."""
    with serve_site() as site:
        hub_site(site, REPO, with_card(tiny_marian_dir, tmp_path / "repo"), MAIN)
        monkeypatch.setenv("HF_ENDPOINT", site.base)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield site


@pytest.fixture
def root(tmp_path: Path, tiny_sentiment_checkpoint: Path) -> Path:
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_sentiment_checkpoint, root / "sentiment-en")
    return root


@pytest.fixture
def reported(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """Every state of the pulls the service reported (what /ready showed as it went)."""
    seen: list[dict[str, str]] = []
    real = Lifecycle.report_pulling

    def report(self: Lifecycle, pulling: dict[str, str]) -> None:
        seen.append(dict(pulling))
        real(self, pulling)

    monkeypatch.setattr(Lifecycle, "report_pulling", report)
    return seen


async def ready(client: httpx.AsyncClient, timeout: float = 120.0) -> dict[str, Any]:
    """/ready once settled: 200, or failed (the pull's process imports torch and transformers: seconds)."""
    end = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < end:
        r = await client.get("/ready")
        if r.status_code == 200 or r.json()["status"] == "failed":
            return r.json()  # type: ignore[no-any-return]
        await asyncio.sleep(0.1)
    raise AssertionError(f"not settled in {timeout} s: {(await client.get('/ready')).json()}")


@pytest.mark.anyio
async def test_a_named_model_is_pulled_at_start_and_served(
    hub: Site, root: Path, reported: list[dict[str, str]]
) -> None:
    settings = Settings(**EAGER, checkpoint_dir=root, models=[REPO], warmup=False)
    async with serve(settings, ready=False) as (_, client):
        assert (await ready(client))["status"] == "ready"
        r = await client.post("/translate", json=FR)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "opus-mt-fr-en"
        assert (await client.post("/sentiment", json={"text": "good"})).status_code == 200
        models = {m["name"]: m for m in (await client.get("/models")).json()["models"]}
        assert models["opus-mt-fr-en"]["revision"] == MAIN
        assert models["opus-mt-fr-en"]["origin"] == "opus-mt"
    assert reported[0] == {"opus-mt-fr-en": "waiting to be pulled"}
    steps = [s["opus-mt-fr-en"] for s in reported if s]
    assert any(s.startswith(f"pulling {REPO}: model.safetensors ") and s.endswith(" MB") for s in steps)
    assert steps[-1] == f"loading {REPO}"
    assert reported[-1] == {}
    assert (root / "opus-mt-fr-en" / "config.json").is_file()

    async with serve(settings, ready=False) as (_, client):  # there now: nothing is pulled again
        assert (await ready(client))["status"] == "ready"
    assert reported[-1] == {}
    assert ("GET", f"/api/models/{REPO}/revision/main") in hub.asked


@pytest.mark.anyio
async def test_a_model_that_cannot_be_pulled_fails_alone(hub: Site, root: Path) -> None:
    absent = "Helsinki-NLP/opus-mt-xx-en"
    settings = Settings(**EAGER, checkpoint_dir=root, models=[absent], warmup=False)
    async with serve(settings, ready=False) as (_, client):
        state = await ready(client)
        assert state["status"] == "failed"  # APP_STRICT_READINESS: a named model is missing
        assert state["failed"]["opus-mt-xx-en"].startswith("could not be pulled: ")
        assert "pulling" not in state
        assert (await client.post("/sentiment", json={"text": "good"})).status_code == 200
    assert not (root / "opus-mt-xx-en").exists()


def test_across_processes_into_an_empty_directory_pulled_once_and_served_by_all(
    hub: Site, tmp_path: Path
) -> None:
    """APP_HTTP_WORKERS=2, APP_MODEL_PROCESSES=2, an empty checkpoint directory (a new volume): it starts,
    the model is pulled once, then loaded in both model processes and routed by both HTTP processes."""
    empty = tmp_path / "volume"
    empty.mkdir()
    env = {"APP_MODELS": REPO, "APP_HTTP_WORKERS": "2", "APP_MODEL_PROCESSES": "2",
           "APP_TORCHSCRIPT": "false", "APP_WARMUP": "false"}  # fmt: skip
    with serve_processes(empty, **env) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        # each on a connection of its own: the HTTP processes share the listening socket
        answers = [httpx.post(f"{server.url}/translate", json=FR, timeout=60) for _ in range(6)]
        assert [(a.status_code, a.json()["model"]) for a in answers] == [(200, "opus-mt-fr-en")] * 6
        ready = client.get("/ready").json()
        assert ready["status"] == "ready"
        assert "pulling" not in ready
        assert ready["models"] == {"opus-mt-fr-en": "ready"}
    assert sum(path == f"/api/models/{REPO}/revision/main" for _, path in hub.asked) == 1

"""Models managed while serving (POST /admin/models/{name}/load, reload, unload): the admin key alone opens
them, a name never leaves the checkpoint directory, a failed load leaves what was served, and under load a
reload swaps versions with no failed request, in one process and across HTTP and model processes."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from app.core.settings import Settings
from model import SentimentClassifier
from tests.app.conftest import EAGER, eventually, serve
from tests.app.test_parallel import eventually as wait_until
from tests.app.test_parallel import serve as serve_processes
from tests.conftest import TinyCheckpoints, sentiment_en

KEY = "admin-secret"
ADMIN = {"Authorization": f"Bearer {KEY}"}
TEXT = {"text": "a good film"}
FR = {"text": "le chat dort", "source_lang": "fr", "target_lang": "en"}


@pytest.fixture
def root(tmp_path: Path, tiny_sentiment_checkpoint: Path) -> Path:
    """A checkpoint directory of copies (the tests replace files): sentiment-en alone."""
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_sentiment_checkpoint, root / "sentiment-en")
    return root


def _retrained(vocab_size: int) -> SentimentClassifier:
    model = sentiment_en(vocab_size)
    with torch.no_grad():  # its head moved: other answers
        model.head.bias.add_(torch.linspace(1.0, -1.0, model.head.bias.numel()))
    return model


@pytest.fixture(scope="module")
def second_version(tiny_checkpoints: TinyCheckpoints) -> Path:
    """sentiment-en as another training run left it: other weights, other answers."""
    return tiny_checkpoints.save("sentiment-en-v2", 1234, _retrained, metrics={"accuracy": 0.5})


def replace(folder: Path, new: Path) -> None:
    """A model folder swapped for another, as a pull does it (the new one complete before it is there)."""
    staging = folder.with_name(folder.name + ".new")
    shutil.copytree(new, staging)
    folder.rename(folder.with_name(folder.name + ".old"))
    staging.rename(folder)


def settings(root: Path, **overrides: Any) -> Settings:
    return Settings(**(EAGER | {"checkpoint_dir": root, "admin_api_key": KEY, "warmup": False} | overrides))


@pytest.mark.anyio
async def test_the_admin_api_is_off_without_its_key(root: Path) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=root)) as (_, client):
        for r in (await client.get("/admin/models"), await client.post("/admin/models/sentiment-en/unload")):
            assert r.status_code == 403
            assert "APP_ADMIN_API_KEY" in r.json()["detail"]
        assert (await client.post("/sentiment", json=TEXT)).status_code == 200


@pytest.mark.anyio
async def test_only_the_admin_key_opens_it_and_a_refusal_changes_nothing(root: Path) -> None:
    client_key = {"Authorization": "Bearer client"}
    async with serve(settings(root, api_key="client")) as (_, client):
        for headers in ({}, client_key, {"Authorization": "Bearer wrong"}):
            r = await client.post("/admin/models/sentiment-en/unload", headers=headers)
            assert r.status_code == 401
            assert "APP_ADMIN_API_KEY" in r.json()["detail"]
            assert (await client.get("/admin/models", headers=headers)).status_code == 401
        assert (await client.post("/sentiment", json=TEXT, headers=client_key)).status_code == 200
        listed = (await client.get("/admin/models", headers=ADMIN)).json()["models"]
        assert [(m["name"], m["status"]) for m in listed] == [("sentiment-en", "ready")]
        assert (
            await client.post("/sentiment", json=TEXT, headers=ADMIN)
        ).status_code == 401  # not a client's


@pytest.mark.anyio
async def test_a_name_never_leaves_the_checkpoint_directory(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(root / "sentiment-en", outside)
    async with serve(settings(root)) as (_, client):
        for name in ("%2E%2E", ".hidden", "a..b", "-x", "x" * 101):
            r = await client.post(f"/admin/models/{name}/load", headers=ADMIN)
            assert r.status_code == 422, name
        for path in ("..%2Foutside", "..%2F..%2Foutside", "%2Ftmp%2Foutside"):  # a slash never matches
            assert (await client.post(f"/admin/models/{path}/load", headers=ADMIN)).status_code == 404
        r = await client.post("/admin/models/absent/load", headers=ADMIN)
        assert r.status_code == 404
        assert r.json()["detail"] == "name: no model folder 'absent' in the checkpoint directory"
        names = [m["name"] for m in (await client.get("/models")).json()["models"]]
        assert names == ["sentiment-en"]


@pytest.mark.anyio
async def test_load_reload_and_unload_while_serving(root: Path, tiny_translator_checkpoint: Path) -> None:
    async with serve(settings(root)) as (_, client):
        assert (await client.post("/translate", json=FR)).status_code == 404
        shutil.copytree(tiny_translator_checkpoint, root / "translate-fr-en")  # pulled while serving
        listed = {m["name"]: m for m in (await client.get("/admin/models", headers=ADMIN)).json()["models"]}
        assert listed["translate-fr-en"]["status"] == "not_loaded"
        assert listed["translate-fr-en"]["served_version"] is None

        r = await client.post("/admin/models/translate-fr-en/load", headers=ADMIN)
        assert r.status_code == 200, r.text
        loaded = r.json()
        assert loaded["changed"] is True
        assert loaded["previous_version"] is None
        assert loaded["version"] == listed["translate-fr-en"]["version"]
        translated = await client.post("/translate", json=FR)
        assert translated.status_code == 200
        assert translated.json()["model"] == "translate-fr-en"
        models = {m["name"]: m for m in (await client.get("/models")).json()["models"]}
        assert models["translate-fr-en"]["version"] == loaded["version"]
        metrics = (await client.get("/metrics")).text
        assert (
            f'model_version{{model="translate-fr-en",revision="",version="{loaded["version"]}"}} 1.0'
            in metrics
        )

        r = await client.post("/admin/models/translate-fr-en/load", headers=ADMIN)
        assert r.status_code == 409
        r = await client.post("/admin/models/translate-fr-en/reload", headers=ADMIN)  # its files unchanged
        assert r.status_code == 200
        assert r.json()["changed"] is False

        r = await client.post("/admin/models/translate-fr-en/unload", headers=ADMIN)
        assert r.status_code == 200
        assert r.json()["previous_version"] == loaded["version"]
        assert (await client.post("/translate", json=FR)).status_code == 404
        assert "translate-fr-en" not in {m["name"] for m in (await client.get("/models")).json()["models"]}
        assert 'model="translate-fr-en"' not in (await client.get("/metrics")).text.split("model_version")[-1]
        assert (await client.post("/admin/models/translate-fr-en/reload", headers=ADMIN)).status_code == 404
        assert (await client.post("/admin/models/translate-fr-en/unload", headers=ADMIN)).status_code == 404
        listed = {m["name"]: m for m in (await client.get("/admin/models", headers=ADMIN)).json()["models"]}
        assert listed["translate-fr-en"]["status"] == "not_loaded"  # its folder stays


@pytest.mark.anyio
async def test_a_load_that_fails_leaves_what_was_served(root: Path) -> None:
    async with serve(settings(root)) as (_, client):
        before = (await client.post("/sentiment", json=TEXT)).json()
        version = (await client.get("/models")).json()["models"][0]["version"]
        (root / "sentiment-en" / "model.safetensors").write_bytes(b"not weights")  # a broken new version
        r = await client.post("/admin/models/sentiment-en/reload", headers=ADMIN)
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert detail.startswith("model sentiment-en could not be loaded: ")
        assert detail.endswith("the version served before goes on")
        assert str(root) not in detail
        assert (await client.post("/sentiment", json=TEXT)).json() == before
        assert (await client.get("/models")).json()["models"][0]["version"] == version

        broken = root / "sentiment-xx"
        broken.mkdir()
        (broken / "config.json").write_text("{not json")
        r = await client.post("/admin/models/sentiment-xx/load", headers=ADMIN)
        assert r.status_code == 422
        assert r.json()["detail"].startswith("model sentiment-xx cannot be served: ")
        assert [m["name"] for m in (await client.get("/models")).json()["models"]] == ["sentiment-en"]
        assert (await client.get("/ready")).status_code == 200


async def _load_while(
    post: Callable[[], Any], change: Callable[[], Any], clients: int = 4, after: int = 40
) -> list[tuple[float, float, int, Any]]:
    """`clients` loops of post() (-> status, answer) around change(): each answer with when it was sent and
    received; the change comes once `after` answers are in, and the loops go on as long again after it."""
    answers: list[tuple[float, float, int, Any]] = []
    done = asyncio.Event()

    async def loop() -> None:
        while not done.is_set():
            sent = time.monotonic()
            status, body = await post()
            answers.append((sent, time.monotonic(), status, body))
            await asyncio.sleep(0)  # in process, a 404 is answered without a suspension: let the others run

    loops = [asyncio.create_task(loop()) for _ in range(clients)]
    while len(answers) < after:
        await asyncio.sleep(0.01)
    await change()
    changed = len(answers)
    while len(answers) < changed + after:
        await asyncio.sleep(0.01)
    done.set()
    await asyncio.gather(*loops)
    return answers


def _probabilities(body: dict[str, Any]) -> tuple[float, ...]:
    return tuple(round(p, 5) for p in body["results"][0]["probabilities"].values())


def _check_swap(answers: list[tuple[float, float, int, Any]], swapped: tuple[float, float]) -> None:
    """Every answer 200; before the reload began, the old version's; sent after it answered, the new one's;
    in between, one of the two."""
    assert [a[2] for a in answers] == [200] * len(answers)
    old = {_probabilities(a[3]) for a in answers if a[1] < swapped[0]}
    new = {_probabilities(a[3]) for a in answers if a[0] > swapped[1]}
    assert len(old) == 1
    assert len(new) == 1
    assert old != new
    assert {_probabilities(a[3]) for a in answers} == old | new


@pytest.mark.anyio
async def test_a_reload_under_load_fails_no_request_and_switches_at_the_swap(
    root: Path, second_version: Path, tiny_translator_checkpoint: Path
) -> None:
    """/sentiment and /translate clients while sentiment-en is reloaded to its second version."""
    shutil.copytree(tiny_translator_checkpoint, root / "translate-fr-en")
    swapped: list[float] = []
    translated: list[int] = []
    async with serve(settings(root)) as (_, client):

        async def post() -> tuple[int, Any]:
            r = await client.post("/sentiment", json=TEXT)
            translated.append((await client.post("/translate", json=FR)).status_code)
            return r.status_code, r.json()

        async def reload() -> None:
            swapped.append(time.monotonic())
            replace(root / "sentiment-en", second_version)
            r = await client.post("/admin/models/sentiment-en/reload", headers=ADMIN)
            assert r.status_code == 200, r.text
            assert r.json()["changed"] is True
            swapped.append(time.monotonic())

        answers = await _load_while(post, reload)
    _check_swap(answers, (swapped[0], swapped[1]))
    assert translated == [200] * len(translated)


def test_across_processes_a_reload_and_an_unload_fail_no_request(
    root: Path, second_version: Path, tiny_translator_checkpoint: Path
) -> None:
    """APP_HTTP_WORKERS=2 and APP_MODEL_PROCESSES=2: /sentiment clients on every HTTP process while a model
    is loaded, sentiment-en reloaded to its second version and the new model unloaded."""
    env = {
        "APP_ADMIN_API_KEY": KEY,
        "APP_HTTP_WORKERS": "2",
        "APP_MODEL_PROCESSES": "2",
        "APP_TORCHSCRIPT": "false",
    }  # fmt: skip  (warm-up on: a model warming up stops no request)
    with serve_processes(root, **env) as server, httpx.Client(base_url=server.url, timeout=60) as admin:
        answers: list[tuple[float, float, int, Any]] = []
        stop = threading.Event()

        def loop() -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:  # a connection of its own
                while not stop.is_set():
                    sent = time.monotonic()
                    r = client.post("/sentiment", json=TEXT)
                    answers.append((sent, time.monotonic(), r.status_code, r.json()))

        loops = [threading.Thread(target=loop) for _ in range(4)]
        for t in loops:
            t.start()
        try:
            shutil.copytree(tiny_translator_checkpoint, root / "translate-fr-en")
            r = admin.post("/admin/models/translate-fr-en/load", headers=ADMIN)
            assert r.status_code == 200, r.text
            translated = [admin.post("/translate", json=FR) for _ in range(4)]  # each HTTP process's
            assert [t.status_code for t in translated] == [200] * 4
            start = time.monotonic()
            replace(root / "sentiment-en", second_version)
            r = admin.post("/admin/models/sentiment-en/reload", headers=ADMIN)
            assert r.status_code == 200, r.text
            swapped, version = (start, time.monotonic()), r.json()["version"]
            r = admin.post("/admin/models/translate-fr-en/unload", headers=ADMIN)
            assert r.status_code == 200, r.text
            assert [admin.post("/translate", json=FR).status_code for _ in range(4)] == [404] * 4
            count = len(answers)
            while len(answers) < count + 40:
                time.sleep(0.01)
        finally:
            stop.set()
            for t in loops:
                t.join()
        _check_swap(answers, swapped)

        victim = server.pids("http")[0]  # its successor learns the models as managed, not as on disk
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: victim not in (pids := server.pids("http")) and len(pids) == 2)
        wait_until(lambda: "reason" not in admin.get("/ready").json())
        unloaded = [httpx.post(f"{server.url}/translate", json=FR, timeout=60) for _ in range(8)]
        assert [u.status_code for u in unloaded] == [404] * 8
        assert {u.json()["detail"] for u in unloaded} == {
            "source_lang/target_lang: no model translates fr -> en (available pairs: none)"
        }

        killed = server.engine(1)  # its successor loads the disk's models: the unloaded one goes again
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: killed not in server.pids("engine") and len(server.pids("engine")) == 2)
        wait_until(lambda: "reason" not in admin.get("/ready").json())
        wait_until(lambda: 'model_version{model="translate-fr-en"' not in admin.get("/metrics").text)
        assert {m["name"]: m["version"] for m in admin.get("/models").json()["models"]} == {
            "sentiment-en": version
        }
        served = (
            f'model_version{{model="sentiment-en",revision="",version="{version}"}} 2.0'  # both processes
        )
        assert served in admin.get("/metrics").text


@pytest.mark.anyio
async def test_a_root_path_does_not_open_the_admin_api(root: Path) -> None:
    """Behind a proxy's prefix (ASGI root_path) the admin routes are the same routes: still the admin key's."""
    async with serve(settings(root, api_key="client")) as (app, _):
        transport = httpx.ASGITransport(app, root_path="/x")
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            client_key = {"Authorization": "Bearer client"}
            r = await client.post("/x/admin/models/sentiment-en/unload", headers=client_key)
            assert r.status_code == 401
            assert (await client.post("/x/sentiment", json=TEXT, headers=client_key)).status_code == 200


@pytest.mark.anyio
async def test_a_model_that_only_failed_can_be_unloaded(root: Path) -> None:
    """A folder that could not be read at start keeps /ready failed (APP_STRICT_READINESS) until it is unloaded."""
    broken = root / "sentiment-xx"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    async with serve(settings(root), ready=False) as (app, client):
        await eventually(lambda: app.state.service.life.status == "failed")
        r = await client.post("/admin/models/sentiment-xx/unload", headers=ADMIN)
        assert r.status_code == 200, r.text
        ready = await client.get("/ready")
        assert ready.status_code == 200
        assert "failed" not in ready.json()


@pytest.mark.anyio
async def test_a_reloaded_translator_gets_its_graphs(root: Path, tiny_translator_checkpoint: Path) -> None:
    """APP_TORCHSCRIPT_AFTER_READY (the default): a version installed while serving is traced after too."""
    shutil.copytree(tiny_translator_checkpoint, root / "translate-fr-en")
    async with serve(settings(root, torchscript=True)) as (app, client):
        before = (await client.post("/translate", json=FR)).json()
        (root / "translate-fr-en" / "README.md").write_text("a card: a new version, the same weights")
        r = await client.post("/admin/models/translate-fr-en/reload", headers=ADMIN)
        assert r.status_code == 200, r.text
        graphs = app.state.service.life.graphs
        await eventually(lambda: graphs.get("translate-fr-en") == "ready", timeout=60)
        handler = app.state.service.tasks["translation"].handlers["translate-fr-en"]
        assert handler.compiled is True
        assert (await client.post("/translate", json=FR)).json() == before


@pytest.mark.anyio
async def test_an_unload_under_load_finishes_what_is_in_flight(
    root: Path, tiny_translator_checkpoint: Path
) -> None:
    """/translate clients while their model is unloaded: each answer is the translation or, once unloaded,
    the 404 naming no such pair; never a 5xx."""
    shutil.copytree(tiny_translator_checkpoint, root / "translate-fr-en")
    unloaded: list[float] = []
    async with serve(settings(root)) as (_, client):
        expected = (await client.post("/translate", json=FR)).json()

        async def post() -> tuple[int, Any]:
            r = await client.post("/translate", json=FR)
            return r.status_code, r.json()

        async def unload() -> None:
            r = await client.post("/admin/models/translate-fr-en/unload", headers=ADMIN)
            assert r.status_code == 200, r.text
            unloaded.append(time.monotonic())

        answers = await _load_while(post, unload, after=20)
    assert {status for *_, status, _ in answers} <= {200, 404}
    assert all(body == expected for *_, status, body in answers if status == 200)
    assert all(status == 404 for sent, _, status, _ in answers if sent > unloaded[0])
    assert any(status == 200 for *_, status, _ in answers)

"""TorchScript graphs built after ready (APP_TORCHSCRIPT_AFTER_READY): the server answers from the eager path
as soon as its models load, each model swaps its graphs in once they are built, and the answers do not
change; a model whose graphs fail stays eager. Across model processes: tests/app/test_model_processes.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.core.settings import Settings
from app.tasks.handlers import TranslationHandler
from app.tasks.sentiment import SentimentHandler
from tests.app.conftest import eventually, serve, wait_graphs

pytestmark = pytest.mark.anyio

REQUESTS = [
    ("/sentiment", {"texts": ["a good film", "the worst film of the year", "bad"]}),
    ("/translate", {"text": "hallo welt. guten tag!", "source_lang": "fr", "target_lang": "en"}),
    ("/translate", {"text": "hallo welt", "source_lang": "fr", "target_lang": "en", "beam_size": 3,
                    "num_hypotheses": 2, "return_scores": True}),
    ("/translate", {"text": "hallo welt", "source_lang": "de", "target_lang": "fr", "beam_size": 2}),
]  # fmt: skip


async def _answers(client: Any) -> list[Any]:
    out = []
    for path, body in REQUESTS:
        r = await client.post(path, json=body)
        assert r.status_code == 200, r.text
        out.append(r.json())
    return out


async def _graphs(client: Any) -> dict[str, str | None]:
    return {m["name"]: m["graphs"] for m in (await client.get("/models")).json()["models"]}


def _hold_compiles(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[Any]]:
    """Every handler's `compile` waits for the returned event; the list: the handlers that entered it."""
    gate, entered = threading.Event(), []
    for kind in (SentimentHandler, TranslationHandler):
        original = kind.compile

        def held(self: Any, original: Any = original) -> None:
            entered.append(self)
            assert gate.wait(60)
            original(self)

        monkeypatch.setattr(kind, "compile", held)
    return gate, entered


async def test_ready_serves_eagerly_until_each_model_swaps_its_graphs_in(
    app_checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, entered = _hold_compiles(monkeypatch)
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir), graphs=False) as (app, client):
        # ready with the first model's graphs being built, the others waiting their turn
        await eventually(lambda: len(entered) == 1)
        graphs = await _graphs(client)
        assert sorted(graphs.values()) == ["building", "pending", "pending", "pending"], graphs
        handlers = [h for t in app.state.service.life.tasks for h in t.handlers.values()]
        assert not any(getattr(h, "compiled", False) for h in handlers)
        eager = await _answers(client)
        assert (await client.get("/ready")).status_code == 200

        gate.set()
        await wait_graphs(client)
        assert set((await _graphs(client)).values()) == {"ready"}
        compiled = [h for h in handlers if isinstance(h, SentimentHandler | TranslationHandler)]
        assert compiled
        assert all(h.compiled for h in compiled)
        for h in compiled:  # the graphs are what runs now
            if isinstance(h, TranslationHandler):
                assert h.decoder is not h.model
            else:
                assert h._graph is not None
        after = await _answers(client)
        assert after[1:] == eager[1:]  # the same translations and scores, bit for bit on a CPU
        # the same labels; probabilities to float32 rounding (the graph's ops round apart from eager's)
        for graph, alone in zip(after[0]["results"], eager[0]["results"], strict=True):
            assert graph["label"] == alone["label"]
            assert graph["probabilities"] == pytest.approx(alone["probabilities"], abs=1e-6)


async def test_a_model_whose_graphs_fail_stays_eager_and_keeps_answering(
    app_checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: TranslationHandler) -> None:
        raise RuntimeError("no graph for you")

    monkeypatch.setattr(TranslationHandler, "compile", broken)
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir)) as (_, client):
        graphs = await _graphs(client)
        assert graphs == {
            "sentiment-en": "ready",
            "sentiment-ko": "ready",
            "translate-fr-en": "failed",
            "translate-multi": "failed",
        }
        assert (await client.get("/ready")).status_code == 200
        await _answers(client)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [({"torchscript_after_ready": False}, "ready"), ({"torchscript": False}, None)],
)
async def test_graphs_built_at_load_or_not_at_all(
    sentiment_only_dir: Path, overrides: dict[str, Any], expected: str | None
) -> None:
    """Built before ready (the first /models after ready lists them built), or never (null: eager)."""
    settings = Settings(checkpoint_dir=sentiment_only_dir, warmup=False, **overrides)
    async with serve(settings, graphs=False) as (app, client):
        assert await _graphs(client) == {"sentiment-en": expected}
        handler = app.state.service.life.tasks[0].handlers["sentiment-en"]
        assert handler.compiled is (expected == "ready")

"""Translators' TorchScript graphs built after ready (APP_TORCHSCRIPT_AFTER_READY): the server answers from the
eager path as soon as its models load, each translator swaps its graphs in once they are built, and the
answers do not change; a model whose graphs fail stays eager. A classifier's graph is built at load. Across
model processes: tests/app/test_model_processes.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.core.settings import Settings
from app.runtime import lifecycle
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
    """Every translator's `compile` waits for the returned event; the list: (handler, thread) of each that
    entered it."""
    gate, entered, original = threading.Event(), [], TranslationHandler.compile

    def held(self: TranslationHandler) -> None:
        entered.append((self, threading.current_thread()))
        assert gate.wait(60)
        original(self)

    monkeypatch.setattr(TranslationHandler, "compile", held)
    return gate, entered


async def test_ready_serves_eagerly_until_each_model_swaps_its_graphs_in(
    app_checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, entered = _hold_compiles(monkeypatch)
    try:
        async with serve(Settings(checkpoint_dir=app_checkpoint_dir), graphs=False) as (app, client):
            # ready: the classifiers' graphs built, the first translator's being built (the one that loaded
            # first), the other one waiting
            await eventually(lambda: len(entered) == 1)
            first = entered[0][0].name
            graphs = await _graphs(client)
            assert graphs.pop(first) == "building"
            assert graphs == {"sentiment-en": "ready", "sentiment-ko": "ready"} | {
                ({"translate-fr-en", "translate-multi"} - {first}).pop(): "pending"
            }
            handlers = [h for t in app.state.service.life.tasks for h in t.handlers.values()]
            translators = [h for h in handlers if isinstance(h, TranslationHandler)]
            assert len(translators) == 2
            assert not any(h.compiled for h in translators)
            assert all(h.compiled for h in handlers if isinstance(h, SentimentHandler))
            eager = await _answers(client)
            assert (await client.get("/ready")).status_code == 200

            gate.set()
            await wait_graphs(client)
            assert set((await _graphs(client)).values()) == {"ready"}
            assert all(h.compiled for h in translators)
            assert all(h.decoder is not h.model for h in translators)  # the traced graphs decode now
            assert await _answers(client) == eager  # the same translations and scores, bit for bit on a CPU
    finally:
        gate.set()  # a failed assert above must not leave the trace waiting


async def test_a_shutdown_never_waits_for_a_graph_being_traced(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan's shutdown (SIGTERM's drain) ends while a translator's trace is still running (after
    TRACE_JOIN_S), and the model stays eager: the trace cannot be interrupted, and a drain must not wait
    for it."""
    monkeypatch.setattr(lifecycle, "TRACE_JOIN_S", 0.2)
    gate, entered = _hold_compiles(monkeypatch)
    try:
        async with serve(Settings(checkpoint_dir=two_models_dir), graphs=False) as (app, _):
            await eventually(lambda: len(entered) == 1)
            life = app.state.service.life
        assert life.status == "shutting_down"
        assert life.graphs["translate-fr-en"] == "building"
        [(translator, thread)] = entered
        assert not translator.compiled
        assert thread.is_alive()  # still tracing
        assert thread.daemon  # the process will not wait for it either
    finally:
        gate.set()
        for _, thread in entered:
            thread.join(60)  # its trace runs to its end: not beside the next tests


async def test_a_model_whose_graphs_fail_stays_eager_and_keeps_answering(
    app_checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Graphs that fail at load (a classifier's) or after ready (a translator's, even with an error a future
    cannot carry) leave their model eager and answering, "failed" in /models, the server ready."""

    def broken(error: BaseException) -> Any:
        def compile(self: Any) -> None:
            raise error

        return compile

    monkeypatch.setattr(SentimentHandler, "compile", broken(RuntimeError("no graph for you")))
    monkeypatch.setattr(TranslationHandler, "compile", broken(StopIteration()))
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir)) as (app, client):
        assert set((await _graphs(client)).values()) == {"failed"}
        assert (await client.get("/ready")).status_code == 200
        await _answers(client)
        handlers = [h for t in app.state.service.life.tasks[:2] for h in t.handlers.values()]
        assert not any(h.compiled for h in handlers)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [({"torchscript_after_ready": False}, "ready"), ({"torchscript": False}, None)],
)
async def test_graphs_built_at_load_or_not_at_all(
    two_models_dir: Path, overrides: dict[str, Any], expected: str | None
) -> None:
    """Built before ready (the first /models after ready lists them built), or never (null: eager)."""
    settings = Settings(checkpoint_dir=two_models_dir, warmup=False, **overrides)
    async with serve(settings, graphs=False) as (app, client):
        assert await _graphs(client) == {"sentiment-en": expected, "translate-fr-en": expected}
        for task in app.state.service.life.tasks[:2]:  # sentiment, translation
            handler = next(iter(task.handlers.values()))
            assert handler.compiled is (expected == "ready")

"""Cost-aware scheduling: work budgets, per-model queue limits, bounded decoding queues, the cheap lane,
decoding that stops once its requests have left, and the bounded PNG renderer."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from torch import Tensor

from app.batching.batcher import Batcher, BatchSettings, InferenceWorkers, ModelQueue
from app.core.errors import QueueFull
from app.core.metrics import NAMESPACE
from app.core.settings import Settings, machine
from app.parallel.shares import model_settings
from app.serving.service import Service
from app.tasks import attention_png
from app.tasks.handlers import DecodeKey, Sentence, TranslationHandler
from app.tasks.heatmap import NICE
from model import Translator
from model.decoding import Decodable
from model.jit import TracedTranslator
from model.translator import DecoderState
from tests.app.conftest import EAGER, eventually, serve

pytestmark = pytest.mark.anyio
FAR = 1e9  # a deadline that never passes
FR = {"source_lang": "fr"}


class HeldTranslations:
    """TranslationHandler.run blocks until `release` (every call); `running` counts calls that started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.started = 0
        original = TranslationHandler.run

        def run(handler: TranslationHandler, items: list[Sentence], key: DecodeKey, **kw: Any) -> Any:
            self.started += 1
            assert self.release.wait(10)
            return original(handler, items, key, **kw)

        monkeypatch.setattr(TranslationHandler, "run", run)


class CountedSteps:
    """Translator.decode_step counts its calls, never picks EOS (a finite penalty) and blocks at step
    `hold_at` until `release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold_at: int) -> None:
        self.steps, self.hold_at = 0, hold_at
        self.holding, self.release = threading.Event(), threading.Event()
        for cls in (Translator, TracedTranslator):  # eager, or the traced graphs the handler decodes with
            monkeypatch.setattr(cls, "decode_step", self._counted(cls.decode_step))

    def _counted(self, original: Callable[..., tuple[Tensor, DecoderState]]) -> Callable[..., Any]:
        def decode_step(
            model: Decodable[Any], tokens: Tensor, state: DecoderState
        ) -> tuple[Tensor, DecoderState]:
            self.steps += 1
            if self.steps == self.hold_at:
                self.holding.set()
                assert self.release.wait(10)
            log_probs, state = original(model, tokens, state)
            log_probs[:, model.cfg.eos_id] -= 1e4
            return log_probs, state

        return decode_step


def metric(text: str, name: str, model: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{NAMESPACE}_{name}{{model="{model}"}}'):
            return float(line.split()[-1])
    return 0.0


# --- work units and the budget ---------------------------------------------------------------------------


def test_a_sentence_costs_its_source_tokens_plus_beam_times_its_output_limit() -> None:
    key = DecodeKey("en", 4)
    assert key.work(Sentence([5] * 10), 66) == 10 + 4 * (2 * 10 + 10)  # default limit: 2 x source + 10
    assert key.work(Sentence([5] * 40), 66) == 40 + 4 * 66  # the limit is capped at the model's max_len
    assert DecodeKey("en", 16).work(Sentence([5] * 10, max_length=5), 66) == 10 + 16 * 5


def test_the_default_budget_takes_a_full_sentiment_batch_not_the_heavy_translation() -> None:
    s = Settings()
    assert s.max_texts * 512 <= s.max_work  # 64 texts at the shipped classifiers' max_len (512 tokens)
    heavy = 64 * 16 * DecodeKey("en", 16).work(Sentence([5]), 66)  # 1-token sentences
    assert heavy > s.max_work
    assert s.max_queue_work >= s.max_work


@pytest.mark.parametrize(
    ("workers", "expensive", "cheap_models", "want"),
    [(2, 0, True, 1), (2, 0, False, 2), (1, 0, True, 1), (4, 0, True, 3), (4, 2, True, 2), (2, 5, True, 2)],
)
def test_expensive_workers_leave_a_lane_when_a_classifier_is_served(
    workers: int, expensive: int, cheap_models: bool, want: int
) -> None:
    s = Settings(inference_workers=workers, expensive_workers=expensive)
    assert s.expensive_workers_count(cheap_models) == want
    pool = InferenceWorkers(workers, 1, s.expensive_workers_count(cheap_models))
    assert pool.expensive_slots == want
    pool.shutdown()


def test_a_queue_work_limit_below_the_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="must be at least APP_MAX_WORK"):
        Settings(max_work=1000, max_queue_work=999)


async def test_a_request_over_budget_is_422_naming_the_setting_its_cost_and_the_limit(
    two_models_dir: Path,
) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=two_models_dir, max_work=300)) as (_, client):
        body = {"texts": ["Le chat dort. Il fait beau !"] * 4, "beam_size": 4} | FR
        r = await client.post("/translate", json=body)
        assert r.status_code == 422
        [detail] = r.json()["detail"]
        assert detail["loc"] == ["body", "texts"]
        assert "more than APP_MAX_WORK (300)" in detail["msg"]
        cost = detail["msg"].split("costs ")[1].removeprefix("at least ").split(" work units")[0]
        assert int(cost.replace(",", "")) > 300
        one = {"text": "Le chat dort.", "beam_size": 1} | FR  # cheap enough
        assert (await client.post("/translate", json=one)).status_code == 200


async def test_a_request_far_over_budget_is_refused_before_tokenizing(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=two_models_dir, max_work=1000)) as (_, client):
        encoded: list[str] = []
        original = TranslationHandler.sentence  # one call per sentence tokenized
        monkeypatch.setattr(
            TranslationHandler, "sentence", lambda h, t, *args: encoded.append(t) or original(h, t, *args)
        )
        body = {"texts": ["Le chat dort. Il fait beau !"] * 8, "beam_size": 4} | FR  # 16 x (1 + 4 x 12) = 784
        assert (await client.post("/translate", json=body)).status_code == 422
        assert len(encoded) == 16  # under the floor: tokenized, then refused at its real cost
        encoded.clear()
        r = await client.post("/translate", json=body | {"beam_size": 16})  # at least 16 x (1 + 16 x 12)
        assert r.status_code == 422
        assert (
            "costs at least 3,088 work units, more than APP_MAX_WORK (1,000)" in r.json()["detail"][0]["msg"]
        )
        assert encoded == []


# --- per-model queue limits and bounded decoding queues ------------------------------------------------------


async def test_distinct_length_penalties_share_the_models_queue_limit(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        **EAGER, checkpoint_dir=two_models_dir, max_queue=2, max_batch_size=1, inference_workers=1
    )
    async with serve(settings) as (app, client):
        held = HeldTranslations(monkeypatch)  # once loaded: the warm-up translates too
        service: Service = app.state.service
        running = asyncio.ensure_future(client.post("/translate", json={"text": "le chat"} | FR))
        await eventually(lambda: held.started == 1)
        waiting = [
            asyncio.ensure_future(
                client.post("/translate", json={"text": "le chat", "length_penalty": lp} | FR)
            )
            for lp in (0.1, 0.2)
        ]
        await eventually(lambda: service.queues.depth("translate-fr-en") == 2)
        for lp in (0.3, 0.4, 0.5, 0.6):  # each a new decoding mode, and the same as the running one
            r = await client.post("/translate", json={"text": "le chat", "length_penalty": lp} | FR)
            assert r.status_code == 429
            assert "2 of 2 items waiting, APP_MAX_QUEUE" in r.json()["detail"]
            assert int(r.headers["retry-after"]) >= 1
        held.release.set()
        assert [(await f).status_code for f in (running, *waiting)] == [200] * 3


async def test_a_length_penalty_off_the_grid_is_422(two_models_dir: Path) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=two_models_dir)) as (_, client):
        r = await client.post("/translate", json={"text": "le chat", "length_penalty": 0.61} | FR)
        assert r.status_code == 422
        assert r.json()["detail"][0]["msg"] == (
            "length_penalty: must be a multiple of 0.05 (0, 0.05, ..., 2), got 0.61"
        )
        ok = await client.post("/translate", json={"text": "le chat", "length_penalty": 0.65} | FR)
        assert ok.status_code == 200


async def test_live_decoding_queues_are_bounded(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(**EAGER, checkpoint_dir=two_models_dir, max_decode_queues=2)
    async with serve(settings) as (app, client):
        service: Service = app.state.service
        for i in range(6):  # one after the other: an idle queue retires for each new mode
            body = {"text": "le chat", "length_penalty": i / 10} | FR
            assert (await client.post("/translate", json=body)).status_code == 200
            assert service.pool.count("translation") <= 2
        held = HeldTranslations(monkeypatch)
        busy = [
            asyncio.ensure_future(client.post("/translate", json={"text": "le chat", "beam_size": b} | FR))
            for b in (1, 2)
        ]
        await eventually(lambda: sum(not b.idle for _, b in service.pool.items()) == 2)  # one runs, one waits
        r = await client.post("/translate", json={"text": "le chat", "beam_size": 3} | FR)
        assert r.status_code == 429
        assert "APP_MAX_DECODE_QUEUES" in r.json()["detail"]
        held.release.set()
        assert [(await f).status_code for f in busy] == [200, 200]
        assert service.pool.count("translation") == 2


async def test_queue_depth_counts_a_batch_waiting_for_a_worker(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker, held by a translation: a sentiment batch submitted behind it waits, and is counted."""
    async with serve(Settings(**EAGER, checkpoint_dir=two_models_dir, inference_workers=1)) as (app, client):
        held = HeldTranslations(monkeypatch)
        translation = asyncio.ensure_future(client.post("/translate", json={"text": "le chat"} | FR))
        await eventually(lambda: held.started == 1)
        sentiment = asyncio.ensure_future(client.post("/sentiment", json={"text": "good"}))
        service: Service = app.state.service
        key = ("sentiment", service.life.registry.entries["sentiment-en"].key, None)  # type: ignore[union-attr]
        await eventually(lambda: key in service.pool and dict(service.pool.items())[key]._submitted)
        assert not dict(service.pool.items())[key]._queue  # submitted to the workers: no longer queued
        text = (await client.get("/metrics")).text
        assert metric(text, "queue_depth", "sentiment-en") == 1
        held.release.set()
        assert (await translation).status_code == (await sentiment).status_code == 200
        assert metric((await client.get("/metrics")).text, "queue_depth", "sentiment-en") == 0


# --- the cheap lane ------------------------------------------------------------------------------------


async def test_expensive_calls_leave_a_worker_to_cheap_ones() -> None:
    workers = InferenceWorkers(2, threads=1)
    release, first_running = threading.Event(), threading.Event()
    started: list[str] = []

    def expensive(name: str) -> str:
        started.append(name)
        first_running.set()
        assert release.wait(10)
        return name

    first = asyncio.ensure_future(workers.run(expensive, "e1", expensive=True))
    await asyncio.to_thread(first_running.wait, 5)
    second = asyncio.ensure_future(workers.run(expensive, "e2", expensive=True))
    assert not workers.free_for(True)
    assert workers.free_for(False)
    assert await workers.run(lambda: "cheap") == "cheap"  # the other worker, while e2 waits
    assert started == ["e1"]
    release.set()
    assert await asyncio.gather(first, second) == ["e1", "e2"]
    workers.shutdown()


async def test_sentiment_is_served_while_translations_hold_the_expensive_lane(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(**EAGER, checkpoint_dir=two_models_dir, inference_workers=2, torch_threads=1)
    async with serve(settings) as (app, client):
        assert (await client.post("/sentiment", json={"text": "fine"})).status_code == 200  # the lane is held
        held = HeldTranslations(monkeypatch)
        translations = [
            asyncio.ensure_future(client.post("/translate", json={"text": "le chat", "beam_size": b} | FR))
            for b in (1, 2)  # two decoding modes: two batches, one of them waiting for the lane
        ]
        workers = app.state.service.life.workers
        await eventually(lambda: held.started == 1 and workers.busy_expensive == 2)  # both submitted
        r = await client.post("/sentiment", json={"text": "good"})
        assert r.status_code == 200
        assert held.started == 1  # the second translation still waits for the expensive lane
        held.release.set()
        assert [(await t).status_code for t in translations] == [200, 200]


async def test_without_recent_cheap_calls_expensive_ones_take_every_worker() -> None:
    """The auto lane (lane_hold_s) is held only after cheap calls: a translation-only load uses every worker,
    and a cheap call makes the next expensive one wait for the lane again."""
    release = threading.Event()
    running: list[str] = []

    def expensive(name: str) -> str:
        running.append(name)
        assert release.wait(10)
        return name

    idle = InferenceWorkers(2, threads=1, expensive=1, lane_hold_s=0.0)  # expired at once
    assert idle.free_for(True)
    assert idle.capacity(True) == 2
    both = [asyncio.ensure_future(idle.run(expensive, n, expensive=True)) for n in ("e1", "e2")]
    await eventually(lambda: len(running) == 2)  # both started: no lane kept without cheap traffic
    release.set()
    assert await asyncio.gather(*both) == ["e1", "e2"]
    idle.shutdown()

    release.clear()
    running.clear()
    busy = InferenceWorkers(2, threads=1, expensive=1, lane_hold_s=60.0)
    assert busy.capacity(True) == 2  # no cheap call yet
    assert await busy.run(lambda: "cheap") == "cheap"
    assert busy.capacity(True) == 1  # held for 60 s after it
    calls = [asyncio.ensure_future(busy.run(expensive, n, expensive=True)) for n in ("e1", "e2")]
    await eventually(lambda: running == ["e1"])
    assert await busy.run(lambda: "cheap 2") == "cheap 2"  # the lane, while e2 waits for it
    assert running == ["e1"]
    release.set()
    assert await asyncio.gather(*calls) == ["e1", "e2"]
    busy.shutdown()


class Gate:
    """A batcher's run: items -> items, each batch held until `open` is set; `running` once one started."""

    def __init__(self) -> None:
        self.running, self.open = threading.Event(), threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.running.set()
        assert self.open.wait(10)
        return items


# --- cheap batches on a small CPU --------------------------------------------------------------------------


class Held:
    """Calls that record their names as they start and hold their worker until `release` is set."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = threading.Event()

    def __call__(self, name: str) -> str:
        self.started.append(name)
        assert self.release.wait(10)
        return name

    async def first(self, workers: InferenceWorkers) -> asyncio.Future[str]:
        """c1 submitted and running: it holds a cheap slot."""
        call = asyncio.ensure_future(workers.run(self, "c1"))
        await eventually(lambda: self.started == ["c1"])
        return call

    async def answers(self, workers: InferenceWorkers, calls: list[asyncio.Future[str]]) -> list[str]:
        """Every call released -> their results; the workers shut down."""
        self.release.set()
        try:
            return await asyncio.gather(*calls)
        finally:
            workers.shutdown()


async def test_a_cheap_call_past_its_slots_waits_while_a_worker_is_free() -> None:
    workers, held = InferenceWorkers(2, threads=1, expensive=1, cheap=1), Held()
    calls = [await held.first(workers)]
    assert not workers.free_for(False)  # a worker is free, the cheap slot is not
    assert (workers.capacity(False), workers.capacity(False, backlog=True)) == (1, 2)
    calls.append(asyncio.ensure_future(workers.run(held, "c2")))
    calls.append(asyncio.ensure_future(workers.run(held, "e1", expensive=True)))
    await eventually(lambda: len(held.started) == 2)
    assert held.started == ["c1", "e1"]  # the free worker passed over the older c2
    assert await held.answers(workers, calls) == ["c1", "c2", "e1"]


async def test_a_backlog_lets_the_oldest_cheap_call_take_the_free_worker() -> None:
    workers, held = InferenceWorkers(2, threads=1, cheap=1), Held()
    calls = [await held.first(workers), asyncio.ensure_future(workers.run(held, "c2"))]
    calls.append(asyncio.ensure_future(workers.run(held, "c3", backlog=True)))  # a whole batch behind it
    await eventually(lambda: len(held.started) == 2)
    assert held.started == ["c1", "c2"]  # oldest first, past the slot
    assert await held.answers(workers, calls) == ["c1", "c2", "c3"]


async def test_a_backlog_wakes_a_worker_for_each_cheap_call_it_lets_start() -> None:
    workers, held = InferenceWorkers(3, threads=1, cheap=1), Held()
    calls = [await held.first(workers), asyncio.ensure_future(workers.run(held, "c2"))]
    # c2 queued and the thread its notify woke asleep again: both idle threads wait on the condition
    await eventually(lambda: len(workers._waiting) == 1 and len(workers._cond._waiters) == 2)  # type: ignore[attr-defined]
    calls.append(asyncio.ensure_future(workers.run(held, "c3", backlog=True)))
    await eventually(lambda: len(held.started) == 3)  # both idle workers, not one of them
    assert await held.answers(workers, calls) == ["c1", "c2", "c3"]


async def test_a_batcher_runs_a_second_cheap_batch_beside_the_first_behind_a_backlog() -> None:
    workers = InferenceWorkers(2, threads=1, cheap=1)
    running, release, lock = [0, 0], threading.Event(), threading.Lock()  # [now, most at once]

    def run(items: list[int]) -> list[int]:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        assert release.wait(10)
        with lock:
            running[0] -= 1
        return items

    settings = BatchSettings(max_batch_size=2, max_delay_s=0.0)
    b: Batcher[int, int] = Batcher("c", run, workers, ModelQueue("c", 100), settings)
    answer = b.enqueue([1, 2, 3, 4, 5, 6], FAR)  # three batches: the first two go side by side
    await eventually(lambda: running[1] == 2)
    release.set()
    assert await answer == [1, 2, 3, 4, 5, 6]
    assert running[1] == 2
    await b.close()
    workers.shutdown()


@pytest.mark.parametrize(
    ("cores", "kw", "want"),
    [
        (2, {}, 1),
        (4, {}, 2),
        (2, {"http_workers": 2}, 2),
        (2, {"max_batch_size": 1}, 2),
        (2, {"inference_workers": 3}, 1),
    ],
)
def test_cheap_batches_side_by_side_leave_the_event_loop_a_core(
    cores: int, kw: dict[str, Any], want: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process on 2 cores: one cheap batch at a time (else every worker); 4 cores: 2 workers, both."""
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: cores)
    monkeypatch.setattr(machine, "usable_cores", lambda: cores)
    assert Settings(device="cpu", **kw).cheap_workers_count() == want


def test_a_model_process_on_its_slice_of_the_cores_runs_cheap_batches_on_every_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Several model processes, each on 2 cores: the layout is the supervisor's, not a 2-core one-process
    server's, whatever a process's own slice would count."""
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)  # the slice, as the process sees it
    s = model_settings(Settings(device="cpu"), 0, 4, cores=2)
    assert s.cheap_workers_count() == s.inference_workers_count() == 2


@pytest.fixture
def one_worker() -> Iterator[InferenceWorkers]:
    """One inference worker."""
    pool = InferenceWorkers()
    yield pool
    pool.shutdown()


async def test_expensive_batches_are_cut_by_work(one_worker: InferenceWorkers) -> None:
    batches: list[list[int]] = []

    def run(items: list[int]) -> list[int]:
        batches.append(items)
        return items

    settings = BatchSettings(max_batch_size=32, max_delay_s=0.0, max_batch_work=10, expensive=True)
    b: Batcher[int, int] = Batcher("w", run, one_worker, ModelQueue("w", 100), settings)
    items = [4, 4, 4, 4, 20, 1]
    assert await b.enqueue(items, FAR, costs=items) == items  # each item costs its value
    assert batches == [[4, 4], [4, 4], [20], [1]]  # at most 10 units, and one item at least
    await b.close()


# --- abandoned work -----------------------------------------------------------------------------------


async def test_a_batch_whose_requests_left_stops_decoding(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the torch engine: its decoder stops between two steps (a CTranslate2 batch runs to its end)
    settings = Settings(
        **EAGER, checkpoint_dir=two_models_dir, request_timeout_s=1.0, translation_engine="torch"
    )
    async with serve(settings) as (app, client):
        steps = CountedSteps(monkeypatch, hold_at=2)  # once loaded: tracing and warm-up decode too
        service: Service = app.state.service
        body = {"text": "le chat aime la musique", "beam_size": 2, "max_length": 40} | FR
        r = await client.post("/translate", json=body)  # held at step 2 past its deadline
        assert r.status_code == 504
        held = steps.holding.is_set()  # else a loaded machine reached step 2 only after the deadline
        steps.release.set()
        assert service.life.workers is not None
        await eventually(lambda: service.life.workers.busy == 0)
        [batcher] = [b for key, b in service.pool.items() if key[0] == "translation"]
        if held:
            assert steps.steps == 2  # not one step after the one in progress when the request left
            assert batcher.stats.stopped == 1
        else:
            assert steps.steps < 2
            assert batcher.stats.stopped + batcher.stats.skipped == 1
        assert batcher.stats.abandoned == 0
        text = (await client.get("/metrics")).text
        assert metric(text, "stopped_items_total", "translate-fr-en") == batcher.stats.stopped
        assert metric(text, "abandoned_items_total", "translate-fr-en") == 0


async def test_items_of_a_request_that_left_mid_batch_are_counted_abandoned(
    one_worker: InferenceWorkers,
) -> None:
    gate = Gate()
    settings = BatchSettings(max_batch_size=8, max_delay_s=0.05)
    b: Batcher[int, int] = Batcher("a", gate, one_worker, ModelQueue("a", 10), settings)
    stays, leaves = b.enqueue([1], FAR), b.enqueue([2, 3], FAR)  # one batch
    await asyncio.to_thread(gate.running.wait, 5)
    leaves.cancel()
    gate.open.set()
    assert await stays == [1]
    assert (b.stats.abandoned, b.stats.stopped) == (2, 0)  # the batch went on for `stays`
    await b.close()


async def test_items_of_a_request_that_left_do_not_hold_queue_places(one_worker: InferenceWorkers) -> None:
    gate = Gate()
    settings = BatchSettings(max_batch_size=1, max_delay_s=0.0)
    b: Batcher[int, int] = Batcher("q", gate, one_worker, ModelQueue("q", 3), settings)
    first = b.enqueue([1], FAR)
    await asyncio.to_thread(gate.running.wait, 5)
    await eventually(lambda: len(b._queue) == 0)
    left = b.enqueue([2, 3], FAR)  # [2] waits for the worker, [3] is queued
    with pytest.raises(QueueFull):
        b.enqueue([4, 5], FAR)
    left.cancel()  # its client leaves: the queued [3] is dropped at the next admission that needs room
    later = b.enqueue([4, 5], FAR)
    gate.open.set()
    assert await first == [1]
    assert await later == [4, 5]
    await b.close()


# --- PNG rendering ------------------------------------------------------------------------------------------


@pytest.fixture
def held_png(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """PngRenderer.render waits for the event, then draws."""
    release = threading.Event()
    original = attention_png.PngRenderer.render

    async def render(self: attention_png.PngRenderer, *args: Any) -> bytes:
        assert await asyncio.to_thread(release.wait, 10)
        return await original(self, *args)

    monkeypatch.setattr(attention_png.PngRenderer, "render", render)
    yield release
    release.set()


async def test_png_rendering_has_a_process_of_its_own_and_a_bound(
    two_models_dir: Path, held_png: threading.Event
) -> None:
    async with serve(Settings(**EAGER, checkpoint_dir=two_models_dir)) as (app, client):
        service: Service = app.state.service
        service.tasks["attention"].png.limit = 2
        body = {"model": "sentiment-en", "text": "good", "format": "png"}
        first = [asyncio.ensure_future(client.post("/attention", json=body)) for _ in range(2)]
        await eventually(lambda: service.tasks["attention"].png.active == 2)
        r = await client.post("/attention", json=body)
        assert r.status_code == 429
        assert "PNG attention requests are in progress" in r.json()["detail"]
        assert int(r.headers["retry-after"]) >= 1
        json_body = await client.post("/attention", json=body | {"format": "json"})
        assert json_body.status_code == 200  # JSON is not bounded by the PNG limit
        held_png.set()
        assert [(await f).headers["content-type"] for f in first] == ["image/png"] * 2
        assert service.tasks["attention"].png.active == 0
        loop = asyncio.get_running_loop()
        executor = service.tasks["attention"].png.executor()
        assert await loop.run_in_executor(executor, os.getpid) != os.getpid()  # drawn in another process
        assert await loop.run_in_executor(executor, os.nice, 0) >= min(19, os.nice(0) + NICE)  # below us

"""The service's life cycle: discovery at start, loading and warm-up in the background, readiness, the models'
graphs after ready, shutdown.

It holds what the tasks' flows (app/serving/service.py, app/tasks/) run on: the registry, the inference workers, the
batchers' queues, the language detector, and the tasks, into which it loads each model's handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from prometheus_client import generate_latest

from app import __version__
from app.batching.workers import InferenceWorkers
from app.core.errors import Unavailable
from app.core.metrics import Metrics
from app.core.settings import ENV_PREFIX, Settings
from app.core.threads import name_os_thread
from app.registry import ModelEntry, Registry, public_reason
from app.runtime.queues import Queues
from app.schemas import ModelInfo, Readiness
from app.tasks import routing
from app.tasks.task import Task
from app.text.langid import LanguageDetector

log = logging.getLogger(__name__)
T = TypeVar("T")
TRACE_JOIN_S = 2.0  # how long a shutdown waits for a graph being traced (a translator's takes well under)


class ModelLoadTimeout(TimeoutError):
    """A model's load outlasted APP_MODEL_LOAD_TIMEOUT_S (it runs on, unwaited, on its own thread)."""


class Lifecycle:
    """status: loading -> ready (or failed) -> shutting_down; `reason` says why it is not ready."""

    def __init__(
        self, settings: Settings, metrics: Metrics, tasks: list[Task], detector: bool = True
    ) -> None:
        """detector=False: no language detector at start-up (a model process: its HTTP processes detect),
        built at its first use instead."""
        self.settings, self.metrics = settings, metrics
        self.build_detector = detector
        self.tasks = tasks  # each gets a handler of every model it serves
        self.registry: Registry | None = None
        self.workers: InferenceWorkers | None = None
        self.queues = Queues(settings, metrics)  # every model's batchers and admission limits
        self.detector: LanguageDetector | None = None
        self.languages: list[str] = []  # what the detector ranks: every task's
        self.status: str = "loading"
        self.reason: str | None = "starting"
        self.model_status: dict[str, str] = {}
        # APP_MODELS being pulled: name -> how far (app/management/pulls.py)
        self.pulling: dict[str, str] = {}
        self.loaded = asyncio.Event()  # the models on disk are loaded (or failed): they serve
        self.serving = False  # loading is over: the models that loaded answer (ready, or failed beside them)
        # model -> its TorchScript graphs: pending | building | ready | failed (it stays eager); absent: none
        self.graphs: dict[str, str] = {}
        self._loader: asyncio.Task[None] | None = None
        self._load_slots: asyncio.Semaphore | None = None  # models loading at once: as many as workers
        self._grapher: asyncio.Task[None] | None = None
        self._tracer: threading.Thread | None = None  # the thread of the graphs being built, if any

    async def start(self) -> None:
        """Validate settings and read every config now (fail fast); load and warm up in the background."""
        s = self.settings
        device = s.torch_device()
        dtype = s.torch_dtype(device)
        if warning := s.dtype_warning(device, dtype):
            log.warning(warning)
        quantize = s.quantize_mode(device, dtype)
        self.metrics.set_build_info(__version__, str(device), str(dtype).removeprefix("torch."), s.quantize)
        root, budget = s.check_checkpoint_dir(), s.model_budget_bytes()
        self.registry = Registry.discover(root, device, dtype, quantize, budget, allow_empty=bool(s.models))
        entries = self.registry.entries.values()
        self.languages = routing.languages(self.tasks, s, self.registry)  # checks APP_ROUTES: fail fast
        for task in self.tasks:
            task.prepare(s, self.registry)
        self.model_status = dict.fromkeys(self.registry.entries, "loading")
        for name, reason in self.registry.failed.items():  # config.json unreadable: failed already
            self._failed(name, reason)
        cheap = any(not t.expensive and t.serves(e) for t in self.tasks for e in entries)
        self.workers = InferenceWorkers(  # forward passes off the event loop
            s.inference_workers_count(),
            s.inference_threads(),
            s.expensive_workers_count(cheap),
            s.cheap_lane_hold_s(),
            s.cheap_workers_count(),
        )
        self.queues.workers = self.workers
        self._load_slots = asyncio.Semaphore(self.workers.workers)
        self._switch_interval = sys.getswitchinterval()  # process-wide: restored by stop()
        sys.setswitchinterval(s.gil_switch_interval_ms / 1000)
        self._loader = asyncio.create_task(self._load_all(), name="load-models")

    async def _load_all(self) -> None:
        """Load and warm up every model (a classifier with its graph; a translator's graphs too unless they
        come after ready), as many at a time as there are inference workers (each model on a thread of its
        own, not on a worker: with several, ready sooner than one model after the other; a load past its
        budget frees its slot), and build the language detector beside them (half a second: its model
        decompresses without the GIL)."""
        assert self.registry is not None
        names = list(self.registry.entries)
        self.reason = f"loading {len(names)} models"
        tasks = [asyncio.create_task(self._load_or_fail(name), name=f"load:{name}") for name in names]
        if self.build_detector:
            tasks.append(asyncio.create_task(self._build_detector(), name="language-detector"))
        try:
            for task in asyncio.as_completed(tasks):
                await task
                left = [n for n, s in self.model_status.items() if s not in ("ready", "failed")]
                self.reason = f"loading {len(left)} of {len(names)} models: {', '.join(left)}"
        except Exception as e:
            log.exception("model loading failed; the service stays not ready")
            self.status, self.reason = "failed", f"{type(e).__name__}: {e}"
            return
        finally:  # after a failure, or stop() cancelling us: the other loads stop at their next step
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.serving = True
        self.loaded.set()
        self.settle()
        gc.collect()
        gc.freeze()  # what loading left alive is permanent: full collections stop rescanning it (p99 spikes)
        log.info("ready: %s", ", ".join(names))
        if "pending" in self.graphs.values():
            self._grapher = asyncio.create_task(self._build_graphs(), name="graphs")

    async def _build_graphs(self) -> None:
        """APP_TORCHSCRIPT_AFTER_READY: each translator's graphs, one model after another on a daemon thread
        (the inference workers keep serving, eagerly until a handler swaps its graphs in; a shutdown stops
        at the model being traced and waits TRACE_JOIN_S for it at most). A model whose graphs fail stays
        eager: the same answers, slower. The graphs are frozen as the models were at ready, without a collection
        (a full one would pause the requests being served; what the traces left is kept for good)."""
        start = asyncio.get_running_loop().time()
        while pending := [n for n, state in self.graphs.items() if state == "pending"]:  # more may come
            name = pending[0]
            self.graphs[name] = "building"
            building = [
                (t, h) for t in self.tasks if getattr(h := t.handlers.get(name), "compiled", None) is False
            ]
            try:
                for _, handler in building:
                    self._tracer, done = _on_daemon_thread(handler.compile)
                    await done
            except Exception as e:  # noqa: BLE001 (any error of one model's graphs: it stays eager)
                log.error("model %s: graphs failed, it stays eager: %s", name, e)
                self.graphs[name] = "failed"
            else:  # a new version installed meanwhile is pending again (Lifecycle.install)
                if self.graphs.get(name) == "building":
                    current = all(t.handlers.get(name) is h for t, h in building)
                    self.graphs[name] = "ready" if current else "pending"
        gc.freeze()  # else every full collection rescans the graphs' objects: p99 doubled (BENCHMARKS.md)
        took = asyncio.get_running_loop().time() - start
        log.info("graphs ready in %.1f s: %s", took, ", ".join(f"{n} {s}" for n, s in self.graphs.items()))

    async def _build_detector(self) -> None:
        assert self.registry is not None
        if self.languages:  # none before APP_MODELS are pulled into an empty checkpoint dir: at relanguage
            self.detector = await asyncio.to_thread(LanguageDetector, self.languages)

    async def _load_or_fail(self, name: str) -> None:
        """A discovered model's handlers, installed; an error fails this model only (its reason recorded,
        its path kept to the log)."""
        assert self.registry is not None
        entry = self.registry.entries[name]
        try:
            self.install(entry, await self.load_version(entry))
        except Exception as e:  # noqa: BLE001 (any error of one model's load: the others go on)
            log.error("model %s failed to load: %s", name, e)
            self._failed(name, public_reason(entry.path.parent, e))

    def settle(self) -> None:
        """Readiness again after a model came or went while serving: ready, unless one still failed (with
        APP_STRICT_READINESS)."""
        if not self.serving or self.status == "shutting_down" or self.registry is None:
            return
        if self.pulling:  # not ready until APP_MODELS are in (the models on disk serve meanwhile)
            self.status, self.reason = "loading", "; ".join(f"{n}: {p}" for n, p in self.pulling.items())
        elif self.registry.failed and self.settings.strict_readiness:
            failed = "; ".join(f"{n} ({r})" for n, r in self.registry.failed.items())
            self.status, self.reason = "failed", f"failed to load: {failed}"
        else:
            self.status, self.reason = "ready", None

    async def relanguage(self) -> None:
        """The language detector for the languages served now (a model came or went): rebuilt off the loop
        when they changed (a model process, which detects only for a task answered whole, rebuilds it at
        its next use)."""
        assert self.registry is not None
        languages = routing.languages(self.tasks, self.settings, self.registry)
        if languages == self.languages:
            return
        self.languages = languages
        if not self.build_detector or not languages:
            self.detector = None
        else:
            self.detector = await asyncio.to_thread(LanguageDetector, languages)

    def report_pulling(self, pulling: dict[str, str]) -> None:
        self.pulling = pulling
        self.settle()

    def pull_failed(self, name: str, reason: str) -> None:
        """An APP_MODELS model that could not be pulled or loaded: failed, as a broken checkpoint."""
        self._failed(name, reason)
        self.settle()

    def _failed(self, name: str, reason: str) -> None:
        assert self.registry is not None
        routing.fail(self.tasks, self.settings, self.registry, name, reason)
        self.model_status[name] = "failed"
        self.metrics.models_failed.labels(name, reason).set(1)

    async def load_version(self, entry: ModelEntry) -> dict[Task, Any]:
        """A model's handlers, one per task serving it, warmed up, not yet installed: its weights (none for
        e.g. an Argos package), then each handler, then warm-up, within APP_MODEL_LOAD_TIMEOUT_S and as
        many at a time as there are inference workers (each on a thread of its own: `_off_workers`)."""
        assert self.registry is not None
        assert self._load_slots is not None
        budget, run = self.settings.model_load_timeout_s, _off_workers
        try:
            async with self._load_slots, asyncio.timeout(budget):
                loaded = await run(self.registry.load, entry) if entry.package is None else None
                handlers = {}
                for task in self.tasks:
                    if task.serves(entry):
                        handlers[task] = await run(task.load, entry, loaded)
                if self.settings.warmup:
                    # at start: a version staged while serving stays out of /ready's models
                    if self.model_status.get(entry.name) == "loading":
                        self.model_status[entry.name] = "warming_up"
                    for handler in handlers.values():
                        if (warmup := getattr(handler, "warmup", None)) is not None:
                            await run(warmup)
        except TimeoutError:  # a handler made before the budget ran out serves nothing
            raise ModelLoadTimeout(
                f"did not load within {budget:g} s ({ENV_PREFIX}MODEL_LOAD_TIMEOUT_S)"
            ) from None
        return handlers

    def install(self, entry: ModelEntry, handlers: dict[Task, Any]) -> None:
        """A loaded version as its model's current one: the tasks route to it from here on (its previous
        version, if any, stays in Task.versions until app/management retires it)."""
        assert self.registry is not None
        name = entry.name
        for task, handler in handlers.items():
            task.install(entry.key, name, handler)
        self.registry.install(entry)
        compiled = [c for h in handlers.values() if (c := getattr(h, "compiled", None)) is not None]
        if compiled and self.settings.torchscript:  # built at load, or pending until ready
            self.graphs[name] = "ready" if all(compiled) else "pending"
            idle = self._grapher is None or self._grapher.done()
            if self.graphs[name] == "pending" and self.serving and idle:  # a version installed while serving
                self._grapher = asyncio.create_task(self._build_graphs(), name="graphs")
        if self.model_status.get(name) != "ready":  # not a new version of a model served
            self.metrics.models_loaded.inc()
        self.model_status[name] = "ready"
        self.metrics.clear_failure(name)
        self.metrics.serve_version(name, entry.version, entry.revision)
        self.metrics.watch_queues(name, partial(self.queues.depth, name))

    async def stop(self) -> None:
        """Stop accepting (ready -> 503), finish queued and in-flight items, stop batchers and the threads."""
        self.status, self.reason = "shutting_down", "the server is shutting down"
        for loading in (self._loader, self._grapher):
            if loading is not None and not loading.done():
                loading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loading
        if self._tracer is not None and self._tracer.is_alive():
            # a trace cannot be stopped: wait a little for it (a process that exits while a thread is inside
            # libtorch can crash on the way out), never longer than TRACE_JOIN_S (the drain goes on)
            await asyncio.to_thread(self._tracer.join, TRACE_JOIN_S)
        await self.queues.pool.close()
        for task in self.tasks:
            await task.stop()
        if self.workers is not None:
            try:
                await asyncio.to_thread(self.workers.shutdown)
            finally:
                sys.setswitchinterval(self._switch_interval)

    async def metrics_text(self) -> bytes:
        """GET /metrics: the Prometheus text of this process (app.parallel: of every process)."""
        return generate_latest(self.metrics.registry)

    def readiness(self) -> Readiness:
        failed = dict(self.registry.failed) if self.registry is not None else {}
        return Readiness(
            status=self.status,  # type: ignore[arg-type]
            reason=self.reason,
            models=dict(self.model_status),
            failed=failed or None,  # absent from /ready when none failed
            pulling=dict(self.pulling) or None,
        )

    def ready_registry(self) -> Registry:
        """The registry once loading is over (a model that failed answers 503 itself: Registry.check_loaded);
        503 with the reason before and during shutdown."""
        if not self.serving or self.status == "shutting_down" or self.registry is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=None if self.status == "failed" else 1)
        return self.registry

    def ready_detector(self) -> LanguageDetector:
        """The language detector once discovery has built it; 503 before. Without one built at start-up, the
        first call builds it (on the event loop: only a task that detects in a model process gets here)."""
        if self.detector is None and not self.build_detector and self.registry is not None and self.languages:
            self.detector = LanguageDetector(self.languages)
        if self.detector is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=1)
        return self.detector

    def models(self) -> list[ModelInfo]:
        """What GET /models lists: every discovered model and its state."""
        assert self.registry is not None
        registry, out = self.registry, []
        for name, e in registry.entries.items():
            cfg, loaded = e.config, e.loaded
            out.append(
                ModelInfo(
                    name=name,
                    task=cfg.task,
                    status=self.model_status.get(name, "loading"),
                    source_langs=e.languages,  # a translator's sources, or the languages a classifier reads
                    target_langs=list(cfg.target_langs),
                    labels=list(cfg.labels),
                    parameters=loaded.num_parameters if loaded else None,
                    dtype=str(registry.dtype).removeprefix("torch."),
                    device=str(registry.device),
                    max_len=cfg.max_len,
                    sha256=loaded.sha256 if loaded else None,
                    metrics=e.metrics,
                    model_card=e.has_card,
                    origin=e.origin,
                    engine=next((x for t in self.tasks if (x := t.engine(e))), "torch"),
                    graphs=self.graphs.get(name),
                    reason=registry.failed.get(name),
                    version=e.version,
                    revision=e.revision,
                    **_card(e.meta),
                )
            )
        return out


def _on_daemon_thread(
    fn: Callable[[], T], name: str = "graphs"
) -> tuple[threading.Thread, asyncio.Future[T]]:
    """fn() started on a daemon thread of its own -> the thread, and a future of the running loop settled
    with its result when fn returns, or its error (any error as an Exception: a future takes no
    StopIteration, and an exit request belongs to the process, not to one model). Unlike asyncio.to_thread's,
    the process never waits for this thread at exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: Exception | None) -> None:
        if not done.done():  # not cancelled meanwhile
            done.set_result(result) if error is None else done.set_exception(error)

    def run() -> None:
        name_os_thread()
        result, error = None, None
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 (handed to the awaiting task)
            plain = isinstance(e, Exception) and not isinstance(e, StopIteration)
            error = e if plain else RuntimeError(f"{type(e).__name__}: {e}")
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, result, error)
        result = error = None  # the error's traceback holds this frame: no cycle left for the collector

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, done


async def _off_workers(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) on a daemon thread of its own: a model's load and warm-up never hold an inference worker,
    and one that outlasts APP_MODEL_LOAD_TIMEOUT_S runs on there, unwaited, while the others serve."""
    _, done = _on_daemon_thread(partial(fn, *args), name="loader")
    return await done


def _card(meta: dict[str, Any]) -> dict[str, Any]:
    """config.json's "card" (training/ship.py writes it): the model's training domain and known limits."""
    card = meta.get("card")
    return {"domain": card.get("domain"), "limits": card.get("limits", [])} if isinstance(card, dict) else {}

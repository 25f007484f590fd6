"""The service's life cycle: discovery at start, loading and warm-up in the background, readiness, shutdown.

It holds what the request flows (app/service.py) run on: the registry, the inference workers, the batchers'
queues, each model's handlers, the language detector and the PNG renderer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from functools import partial
from typing import Any

from prometheus_client import generate_latest

from app import __version__
from app.batching.workers import InferenceWorkers
from app.core.errors import Unavailable
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.queues import Queues
from app.registry import Registry, public_reason
from app.schemas import ModelInfo, Readiness
from app.tasks.argos import ArgosTranslationHandler
from app.tasks.attention_maps import AttentionHandler
from app.tasks.attention_png import PngRenderer
from app.tasks.ctranslate2 import CT2TranslationHandler
from app.tasks.handlers import SentimentHandler, TranslationHandler
from app.text.langid import LanguageDetector

log = logging.getLogger(__name__)


class Lifecycle:
    """status: loading -> ready (or failed) -> shutting_down; `reason` says why it is not ready."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.registry: Registry | None = None
        self.workers: InferenceWorkers | None = None
        self.queues = Queues(settings, metrics)  # every model's batchers and admission limits
        self.pool = self.queues.pool
        self.png = PngRenderer()
        self.sentiment: dict[str, SentimentHandler] = {}
        self.translation: dict[str, TranslationHandler] = {}
        self.attention_handlers: dict[str, AttentionHandler] = {}
        self.detector: LanguageDetector | None = None
        self.status: str = "loading"
        self.reason: str | None = "starting"
        self.model_status: dict[str, str] = {}
        self.serving = False  # loading is over: the models that loaded answer (ready, or failed beside them)
        self._loader: asyncio.Task[None] | None = None
        self._ct2_kwargs: dict[str, Any] | None = None
        self._argos_kwargs: dict[str, Any] | None = None

    async def start(self) -> None:
        """Validate settings and read every config now (fail fast); load and warm up in the background."""
        s = self.settings
        device = s.torch_device()
        dtype = s.torch_dtype(device)
        if warning := s.dtype_warning(device, dtype):
            log.warning(warning)
        quantize = s.quantize_mode(device, dtype)
        self.metrics.set_build_info(__version__, str(device), str(dtype).removeprefix("torch."), s.quantize)
        self._ct2_kwargs = s.ctranslate2_kwargs(device, dtype)  # None: the torch engine
        self.registry = Registry.discover(
            s.check_checkpoint_dir(), device, dtype, quantize, s.origin_order, s.routes
        )
        if any(e.package is not None for e in self.registry.entries.values()):  # Argos: CTranslate2 only
            self._argos_kwargs = s.ctranslate2_kwargs(device, dtype, always=True)
        self.model_status = dict.fromkeys(self.registry.entries, "loading")
        for name, reason in self.registry.failed.items():  # config.json unreadable: failed already
            self._failed(name, reason)
        self.detector = await asyncio.to_thread(LanguageDetector, self.registry.languages)  # loads its model
        cheap = any(e.task == "sentiment" for e in self.registry.entries.values())
        self.workers = InferenceWorkers(  # forward passes off the event loop
            s.inference_workers_count(),
            s.inference_threads(),
            s.expensive_workers_count(cheap),
            s.cheap_lane_hold_s(),
        )
        self.queues.workers = self.workers
        self._switch_interval = sys.getswitchinterval()  # process-wide: restored by stop()
        sys.setswitchinterval(s.gil_switch_interval_ms / 1000)
        self._loader = asyncio.create_task(self._load_all(), name="load-models")

    async def _load_all(self) -> None:
        """Load, compile and warm up every model, as many at a time as there are inference workers (each
        step runs on one thread: with several workers, ready sooner than one model after the other)."""
        assert self.registry is not None
        names = list(self.registry.entries)
        self.reason = f"loading {len(names)} models"
        tasks = [asyncio.create_task(self._load_or_fail(name), name=f"load:{name}") for name in names]
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
        if self.registry.failed and self.settings.strict_readiness:
            failed = "; ".join(f"{n} ({r})" for n, r in self.registry.failed.items())
            self.status, self.reason = "failed", f"failed to load: {failed}"
        else:
            self.status, self.reason = "ready", None
        gc.collect()
        gc.freeze()  # what loading left alive is permanent: full collections stop rescanning it (p99 spikes)
        log.info("ready: %s", ", ".join(names))

    async def _load_or_fail(self, name: str) -> None:
        """_load_one; an error fails this model only (its reason recorded, its path kept to the log)."""
        assert self.registry is not None
        try:
            await self._load_one(name)
        except Exception as e:  # noqa: BLE001 (any error of one model's load: the others go on)
            log.error("model %s failed to load: %s", name, e)
            self._failed(name, public_reason(self.registry.entries[name].path.parent, e))

    def _failed(self, name: str, reason: str) -> None:
        assert self.registry is not None
        self.registry.fail(name, reason, reroute=not self.settings.strict_readiness)
        self.model_status[name] = "failed"
        self.metrics.models_failed.labels(name, reason).set(1)

    async def _load_one(self, name: str) -> None:
        assert self.registry is not None
        assert self.workers is not None
        run, torchscript = self.workers.run, self.settings.torchscript
        handler: SentimentHandler | TranslationHandler
        package = self.registry.entries[name].package
        if package is not None:  # an Argos package: CTranslate2, no torch model, no attention handler
            handler = self.translation[name] = await run(
                ArgosTranslationHandler, name, package, self._argos_kwargs
            )
            return await self._ready(name, handler)
        loaded = await run(self.registry.load, name)
        if loaded.config.task == "sentiment":
            handler = self.sentiment[name] = await run(SentimentHandler, loaded, torchscript)
        elif self._ct2_kwargs is not None:
            handler = await run(CT2TranslationHandler, loaded, torchscript, self._ct2_kwargs)
            self.translation[name] = handler
        else:
            handler = self.translation[name] = await run(TranslationHandler, loaded, torchscript)
        self.attention_handlers[name] = AttentionHandler(loaded)
        await self._ready(name, handler)

    async def _ready(self, name: str, handler: SentimentHandler | TranslationHandler) -> None:
        """Warm the model up (if set), then count it ready."""
        assert self.workers is not None
        if self.settings.warmup:
            self.model_status[name] = "warming_up"
            await self.workers.run(handler.warmup)
        self.model_status[name] = "ready"
        self.metrics.models_loaded.inc()
        self.metrics.watch_queues(name, partial(self.queues.depth, name))

    async def stop(self) -> None:
        """Stop accepting (ready -> 503), finish queued and in-flight items, stop batchers and the threads."""
        self.status, self.reason = "shutting_down", "the server is shutting down"
        if self._loader is not None and not self._loader.done():
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
        await self.pool.close()
        await asyncio.to_thread(self.png.shutdown)
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
        )

    def ready_registry(self) -> Registry:
        """The registry once loading is over (a model that failed answers 503 itself: Registry.check_loaded);
        503 with the reason before and during shutdown."""
        if not self.serving or self.status == "shutting_down" or self.registry is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=None if self.status == "failed" else 1)
        return self.registry

    def ready_detector(self) -> LanguageDetector:
        """The language detector once discovery has built it; 503 before."""
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
                    source_langs=list(cfg.source_langs) if cfg.task == "translation" else e.languages,
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
                    engine="ctranslate2"
                    if e.package is not None or self._ct2_kwargs is not None
                    else "torch",
                    reason=registry.failed.get(name),
                    **_card(e.meta),
                )
            )
        return out


def _card(meta: dict[str, Any]) -> dict[str, Any]:
    """config.json's "card" (training/ship.py writes it): the model's training domain and known limits."""
    card = meta.get("card")
    return {"domain": card.get("domain"), "limits": card.get("limits", [])} if isinstance(card, dict) else {}

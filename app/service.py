"""The running service: registry, handlers, batchers and the inference workers, with their life cycle."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from prometheus_client import generate_latest

from app import __version__
from app.batching.admission import sentence_floor
from app.batching.batcher import Batcher, InferenceWorkers
from app.batching.wait import Disconnected, wait_all
from app.core.errors import DeadlineExceeded, Unavailable, invalid
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.queues import Queues
from app.registry import Registry
from app.schemas import (
    AUTO,
    DEFAULT_LENGTH_PENALTY,
    AttentionRequest,
    DetectedLanguage,
    ModelInfo,
    Readiness,
    SentimentRequest,
    SentimentResponse,
    TranslateRequest,
    TranslateResponse,
)
from app.tasks.attention_maps import AttentionHandler, AttentionItem
from app.tasks.attention_png import PngRenderer
from app.tasks.ctranslate2 import CT2TranslationHandler
from app.tasks.handlers import DecodeKey, Sentence, SentimentHandler, TranslationHandler
from app.text.langid import Detection, LanguageDetector
from app.text.sentences import split_sentences

log = logging.getLogger(__name__)
INLINE_DETECT = (4, 2000)  # texts, characters: ~0.06 ms a short text, so up to ~0.3 ms on the event loop


class Service:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.registry: Registry | None = None
        self.worker: InferenceWorkers | None = None
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
        self._loader: asyncio.Task[None] | None = None
        self._ct2_kwargs: dict[str, Any] | None = None

    # --- life cycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Validate settings and read every config now (fail fast); load and warm up in the background."""
        device = self.settings.torch_device()
        dtype = self.settings.torch_dtype(device)
        if warning := self.settings.dtype_warning(device, dtype):
            log.warning(warning)
        quantize = self.settings.quantize_mode(device, dtype)
        self.metrics.set_build_info(
            __version__, str(device), str(dtype).removeprefix("torch."), self.settings.quantize
        )
        self._ct2_kwargs = self.settings.ctranslate2_kwargs(device, dtype)  # None: the torch engine
        self.registry = Registry.discover(self.settings.check_checkpoint_dir(), device, dtype, quantize)
        self.model_status = dict.fromkeys(self.registry.entries, "loading")
        self.detector = await asyncio.to_thread(LanguageDetector, self.registry.languages)  # 0.1 s
        cheap = any(e.task == "sentiment" for e in self.registry.entries.values())
        self.worker = InferenceWorkers(  # forward passes off the event loop
            self.settings.inference_workers_count(),
            self.settings.inference_threads(),
            self.settings.expensive_workers_count(cheap),
            self.settings.cheap_lane_hold_s(),
        )
        self.queues.worker = self.worker
        self._switch_interval = sys.getswitchinterval()  # process-wide: restored by stop()
        sys.setswitchinterval(self.settings.gil_switch_interval_ms / 1000)
        self._loader = asyncio.create_task(self._load_all(), name="load-models")

    async def _load_all(self) -> None:
        """Load, compile and warm up every model, as many at a time as there are inference workers (each
        step runs on one thread; measured: ready ~0.4 s sooner with 5 models on 2 workers)."""
        assert self.registry is not None
        names = list(self.registry.entries)
        self.reason = f"loading {len(names)} models"
        tasks = [asyncio.create_task(self._load_one(name), name=f"load:{name}") for name in names]
        try:
            for task in asyncio.as_completed(tasks):
                await task
                left = [n for n, s in self.model_status.items() if s != "ready"]
                self.reason = f"loading {len(left)} of {len(names)} models: {', '.join(left)}"
        except Exception as e:
            log.exception("model loading failed; the service stays not ready")
            self.status, self.reason = "failed", f"{type(e).__name__}: {e}"
            return
        finally:  # after a failure, or stop() cancelling us: the other loads stop at their next step
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.status, self.reason = "ready", None
        gc.collect()
        gc.freeze()  # what loading left alive is permanent: full collections stop rescanning it (p99 spikes)
        log.info("ready: %s", ", ".join(names))

    async def _load_one(self, name: str) -> None:
        assert self.registry is not None
        assert self.worker is not None
        loaded = await self.worker.run(self.registry.load, name)
        handler: SentimentHandler | TranslationHandler
        if loaded.config.task == "sentiment":
            handler = self.sentiment[name] = await self.worker.run(
                SentimentHandler, loaded, self.settings.torchscript
            )
        elif self._ct2_kwargs is not None:
            handler = self.translation[name] = await self.worker.run(
                CT2TranslationHandler, loaded, self.settings.torchscript, self._ct2_kwargs
            )
        else:
            handler = self.translation[name] = await self.worker.run(
                TranslationHandler, loaded, self.settings.torchscript
            )
        self.attention_handlers[name] = AttentionHandler(loaded)
        if self.settings.warmup:
            self.model_status[name] = "warming_up"
            await self.worker.run(handler.warmup)
        self.model_status[name] = "ready"
        self.metrics.models_loaded.inc()
        self.metrics.watch_queues(name, partial(self.queues.depth, name))

    async def stop(self) -> None:
        """Stop accepting (ready -> 503), finish queued and in-flight items, stop batchers and the thread."""
        self.status, self.reason = "shutting_down", "the server is shutting down"
        if self._loader is not None and not self._loader.done():
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
        await self.pool.close()
        await asyncio.to_thread(self.png.shutdown)
        if self.worker is not None:
            try:
                await asyncio.to_thread(self.worker.shutdown)
            finally:
                sys.setswitchinterval(self._switch_interval)

    async def metrics_text(self) -> bytes:
        """GET /metrics: the Prometheus text of this process (app.parallel: of every process)."""
        return generate_latest(self.metrics.registry)

    def readiness(self) -> Readiness:
        return Readiness(status=self.status, reason=self.reason, models=dict(self.model_status))  # type: ignore[arg-type]

    def _registry(self) -> Registry:
        """The registry once ready; 503 with the reason before and during shutdown."""
        if self.status != "ready" or self.registry is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=None if self.status == "failed" else 1)
        return self.registry

    # --- requests -------------------------------------------------------------------------------------

    async def classify(self, req: SentimentRequest, disconnected: Disconnected = None) -> SentimentResponse:
        registry, texts = self._registry(), req.items
        self._check_texts(texts, req.field)
        groups: dict[str, list[int]] = {}  # model -> text indices, in first-appearance order
        for i, text in enumerate(texts):
            groups.setdefault(registry.sentiment_for(text, req.model), []).append(i)
        deadline = self._deadline()
        jobs = []
        for name, idxs in groups.items():
            handler = self.sentiment[name]
            jobs.append(
                (self.queues.sentiment(name, handler.run), [handler.tokenize(texts[i]) for i in idxs])
            )
        outputs = await self._submit(jobs, deadline, disconnected, req.field)
        results: list[Any] = [None] * len(texts)
        for (name, idxs), probs in zip(groups.items(), outputs, strict=True):
            for i, p in zip(idxs, probs, strict=True):
                results[i] = self.sentiment[name].result(p)
        return SentimentResponse.model_construct(model=",".join(groups), results=results)  # built here: valid

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]:
        """Per text its languages, best first, among those served (the first may be an unserved language
        the text is clearly in; empty when the text has no letters): app.text.langid. Limits as the model routes
        (422 naming `field`)."""
        self._check_texts(texts, field)
        detector = self.detector
        if detector is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=1)
        if len(texts) <= INLINE_DETECT[0] and sum(map(len, texts)) <= INLINE_DETECT[1]:
            return [detector.detect(t) for t in texts]
        return await asyncio.to_thread(lambda: [detector.detect(t) for t in texts])

    async def translate(
        self, req: TranslateRequest, disconnected: Disconnected = None, *, max_texts: int | None = None
    ) -> TranslateResponse:
        """Texts grouped by model (one group unless source_lang is auto and the texts' languages differ).
        max_texts: instead of APP_MAX_TEXTS (the LibreTranslate API sends the text nodes of HTML documents
        whose count it has checked)."""
        registry, texts, field = self._registry(), req.items, req.field
        self._check_texts(texts, field, max_texts)
        detected = await self.detect(texts, field) if req.source_lang == AUTO else None
        if detected is None:
            groups = {
                registry.translator_for(req.source_lang, req.target_lang, req.model): list(range(len(texts)))
            }
        else:  # model -> text indices, in first-appearance order
            groups = {}
            for i, found in enumerate(detected):
                loc = (field,) if field == "text" else (field, i)
                groups.setdefault(
                    registry.auto_translator(found, req.target_lang, req.model, loc), []
                ).append(i)
        key = DecodeKey(req.target_lang, req.beam_size, req.length_penalty, req.max_length)
        split = [  # each text as lines of sentences, in its language: split once, priced, then tokenized
            split_sentences(text, req.source_lang if detected is None else detected[i][0].language)
            for i, text in enumerate(texts)
        ]
        floor = 0  # far over budget is refused before tokenizing (a hostile loop costs the split only)
        for name, idxs in groups.items():
            sentences = sum(len(line) for i in idxs for line in split[i])
            floor += sentences * sentence_floor(key, self.translation[name].max_len)
        self._check_work(floor, field, "at least ")
        jobs, layouts = [], []
        for name, idxs in groups.items():
            handler = self.translation[name]
            items, lays = handler.sentences([split[i] for i in idxs], field, req.num_hypotheses, idxs)
            jobs.append((self.queues.translation(name, handler, key), items))
            layouts.append(lays)
        outputs = await self._submit(jobs, self._deadline(), disconnected, field)
        results: list[Any] = [None] * len(texts)
        for (name, idxs), lays, out in zip(groups.items(), layouts, outputs, strict=True):
            for i, lay in zip(idxs, lays, strict=True):
                results[i] = r = self.translation[name].join(lay, out, req.num_hypotheses, req.return_scores)
                if detected is not None:  # additive fields: only when the language was detected
                    best = detected[i][0]
                    r.model, r.detected_language = (
                        name,
                        DetectedLanguage(language=best.language, confidence=best.confidence),
                    )
        return TranslateResponse(model=",".join(groups), results=results)

    async def attention(
        self, req: AttentionRequest, png: bool, disconnected: Disconnected = None
    ) -> tuple[bytes, str]:
        """The JSON body (AttentionResponse) or a PNG, with its media type."""
        if not png:
            return await self._attention(req, False, disconnected)
        with self.png.admit():  # 429 beyond a few PNG requests at once: each draws for ~1 s of CPU
            return await self._attention(req, True, disconnected)

    async def _attention(
        self, req: AttentionRequest, png: bool, disconnected: Disconnected
    ) -> tuple[bytes, str]:
        entry = self._registry().get_any(req.model)
        self._check_texts([req.text], "text")
        if req.target is not None:
            self._check_texts([req.target], "target")
        handler = self.attention_handlers[entry.name]
        sel = handler.select(req.layers, req.heads)
        if png and handler.is_translator and not sel.decoder:  # its PNG shows cross-attention
            raise invalid(
                ("layers",),
                f"the PNG of a translator shows cross-attention: select a decoder layer "
                f"(0..{handler.decoder_layers - 1})",
            )
        deadline, translation = self._deadline(), None
        item = handler.source(req.text)
        if handler.is_translator:
            lang = self._target_lang(entry.name, req.target_lang)
            if req.target is not None:
                item = AttentionItem(item.source, handler.decoder_input(req.target, lang))
            else:  # greedy translation through the batcher, like /translate with beam_size=1
                greedy = self.queues.translation(
                    entry.name, self.translation[entry.name], DecodeKey(lang, 1, DEFAULT_LENGTH_PENALTY, None)
                )
                [[[best]]] = await self._submit([(greedy, [Sentence(item.source)])], deadline, disconnected)
                translation = best.text
                item = AttentionItem(item.source, [entry.config.start_id(lang), *best.tokens])
        elif req.target is not None or req.target_lang is not None:
            field = "target" if req.target is not None else "target_lang"
            raise invalid(
                (field,), f"only translation models take a {field}; {entry.name} is a {entry.task} model"
            )
        handler.check_size(item, sel)  # the target is known now (given or translated)
        maps_batcher = self.queues.attention(entry.name, handler.run)
        [[maps]] = await self._submit([(maps_batcher, [item])], deadline, disconnected)
        # megabytes of JSON (or a rendered PNG) for a long text: built off the event loop, and still
        # answered 504 past the deadline
        if png:
            body, media = await self.png.render(handler, item, maps, sel), "image/png"
        else:
            body = await asyncio.to_thread(handler.encode_json, item, maps, sel, translation)
            media = "application/json"
        if asyncio.get_running_loop().time() > deadline:
            raise DeadlineExceeded.after(self.settings.request_timeout_s)
        return body, media

    def models(self) -> list[ModelInfo]:
        assert self.registry is not None
        out = []
        for name, e in self.registry.entries.items():
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
                    dtype=str(self.registry.dtype).removeprefix("torch."),
                    device=str(self.registry.device),
                    max_len=cfg.max_len,
                    sha256=loaded.sha256 if loaded else None,
                    metrics=e.metrics,
                    model_card=e.has_card,
                )
            )
        return out

    # --- helpers --------------------------------------------------------------------------------------

    def _check_texts(self, texts: Sequence[str], field: str, max_texts: int | None = None) -> None:
        """Limits from settings (422 naming the field, the limit and the value)."""
        s = self.settings
        if len(texts) > (limit := max_texts or s.max_texts):
            raise invalid((field,), f"at most {limit} texts per request (got {len(texts)})", "too_long")
        for i, text in enumerate(texts):
            if len(text) > s.max_chars:
                loc = (field,) if field != "texts" else (field, i)
                raise invalid(loc, f"at most {s.max_chars} characters per text (got {len(text)})", "too_long")

    def _target_lang(self, name: str, requested: str | None) -> str:
        cfg = self._registry().entries[name].config
        lang = requested or ("en" if "en" in cfg.target_langs else cfg.target_langs[0])
        if lang not in cfg.target_langs or (cfg.target_lang_ids and lang not in cfg.target_lang_ids):
            raise invalid(
                ("target_lang",), f"{name} translates into {', '.join(cfg.target_langs)}, not {lang!r}"
            )
        return lang

    def _check_work(self, work: int, field: str, at_least: str = "") -> None:
        """422 naming APP_MAX_WORK when a request costs more work units than it allows."""
        if work > self.settings.max_work:
            raise invalid(
                (field,),
                f"this request costs {at_least}{work:,} work units, more than APP_MAX_WORK "
                f"({self.settings.max_work:,}); a translated sentence costs its source tokens + beam_size x "
                "its output length limit: send fewer texts or sentences, or a smaller beam_size or max_length",
                "too_long",
            )

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.settings.request_timeout_s

    async def _submit(
        self,
        jobs: list[tuple[Batcher[Any, Any], list[Any]]],
        deadline: float,
        disconnected: Disconnected,
        field: str = "text",
    ) -> list[list[Any]]:
        """Enqueue each (batcher, items) job and wait for all results, the deadline, or the client leaving.
        422 when the request's work exceeds APP_MAX_WORK or a model's queue could never hold it."""
        futures: list[asyncio.Future[list[Any]]] = []
        self._check_work(sum(batcher.work(items) for batcher, items in jobs), field)
        for batcher, items in jobs:  # a 429 could never clear for these: nothing is queued yet
            if len(items) > batcher.queue.max_items:
                raise invalid(
                    (field,),
                    f"this request makes {len(items)} items (texts or sentences) for one model, more than its "
                    f"queue holds ({batcher.queue.max_items}, APP_MAX_QUEUE)",
                    "too_long",
                )
        try:
            for batcher, items in jobs:
                futures.append(batcher.enqueue(items, deadline))
            return await wait_all(futures, deadline, disconnected, self.settings.request_timeout_s)
        finally:
            for f in futures:  # no-op when done; otherwise the batch loop skips the items
                f.cancel()

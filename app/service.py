"""The request flows: each route's texts become batch items, wait in their model's batchers, and come back as
a response. What they run on, and its life cycle, is app/lifecycle.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NamedTuple

from app.batching.batcher import Batcher
from app.tasks.groups import group_by_model, scatter
from app.batching.wait import Disconnected, wait_all
from app.core.errors import DeadlineExceeded, invalid
from app.core.limits import Limits
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.lifecycle import Lifecycle
from app.registry import ModelEntry
from app.schemas import (
    AUTO,
    AttentionRequest,
    DetectedLanguage,
    SentimentRequest,
    SentimentResponse,
    TranslateRequest,
    TranslateResponse,
    TranslationResult,
)
from app.tasks.attention_maps import AttentionHandler, AttentionItem, LayerSelection
from app.tasks.handlers import DecodeKey, Sentence
from app.text.langid import Detection
from app.text.passthrough import PASSTHROUGH, passed
from app.text.sentences import split_sentences

Job = tuple[Batcher[Any, Any], list[Any]]  # a batcher and one request's items for it


class InlineWork(NamedTuple):
    """Up to how much work runs on the event loop rather than in a thread (a thread hop costs more)."""

    texts: int
    chars: int


INLINE_DETECT = InlineWork(texts=4, chars=2000)  # a few short texts: detected sooner than a thread hop


class Service(Lifecycle):
    """Each route's flow (classify, detect, translate, attention) on the models its Lifecycle serves."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        super().__init__(settings, metrics)
        self.limits = Limits(settings)

    async def classify(self, req: SentimentRequest, disconnected: Disconnected = None) -> SentimentResponse:
        registry, texts, field = self.ready_registry(), req.items, req.field
        self.limits.check_texts(texts, field)
        groups = group_by_model(registry.sentiment_for(text, req.model) for text in texts)
        deadline = self._deadline()
        jobs = []
        for name, idxs in groups.items():
            handler = self.sentiment[name]
            jobs.append((self.queues.sentiment(name, handler), [handler.tokenize(texts[i]) for i in idxs]))
        outputs = await self._submit(jobs, deadline, disconnected, field)
        results = [self.sentiment[name].result(probs) for name, probs in scatter(groups, outputs)]
        return SentimentResponse.model_construct(model=",".join(groups), results=results)  # built here: valid

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]:
        """Per text its languages, best first, among those served (the first may be an unserved language
        the text is clearly in; empty when the text has no letters): app.text.langid. Limits as the model routes
        (422 naming `field`)."""
        self.limits.check_texts(texts, field)
        detector = self.ready_detector()
        if len(texts) <= INLINE_DETECT.texts and sum(map(len, texts)) <= INLINE_DETECT.chars:
            return [detector.detect(t) for t in texts]
        return await asyncio.to_thread(lambda: [detector.detect(t) for t in texts])

    async def translate(
        self, req: TranslateRequest, disconnected: Disconnected = None, *, max_texts: int | None = None
    ) -> TranslateResponse:
        """Texts grouped by model (one group unless source_lang is auto and the texts' languages differ).
        max_texts: instead of APP_MAX_TEXTS (the LibreTranslate API sends the text nodes of HTML documents
        whose count it has checked)."""
        registry, texts, field = self.ready_registry(), req.items, req.field
        self.limits.check_texts(texts, field, max_texts)
        detected = await self.detect(texts, field) if req.source_lang == AUTO else None
        # each text's language (None: no letters); texts answered as they came: app/text/passthrough.py
        langs = (
            [req.source_lang] * len(texts)
            if detected is None
            else [f[0].language if f else None for f in detected]
        )
        through = set(passed(texts, langs, req.target_lang))
        groups = registry.route(req, detected, through)
        key = DecodeKey(req.target_lang, req.beam_size)  # the queue; the other options go per sentence
        split = [  # each text as lines of sentences, in its language: split once, priced, then tokenized
            [] if i in through else split_sentences(text, langs[i] or req.source_lang)
            for i, text in enumerate(texts)
        ]
        floor = 0  # far over budget is refused before tokenizing (a hostile loop costs the split only)
        for name, idxs in groups.items():
            sentences = sum(len(line) for i in idxs for line in split[i])
            floor += sentences * self.translation[name].least_cost(key, req.max_length)
        self.limits.check_work(floor, field, "at least ")
        jobs, layouts = [], []
        for name, idxs in groups.items():
            handler, rows = self.translation[name], [split[i] for i in idxs]
            options = (req.num_hypotheses, idxs, req.length_penalty, req.max_length, req.replace_unknowns)
            items, lays = handler.sentences(rows, field, *options)
            jobs.append((self.queues.translation(name, handler, key), items))
            layouts.append(lays)
        outputs = await self._submit(jobs, self._deadline(), disconnected, field) if jobs else []
        return self._joined(req, detected, through, groups, [*zip(layouts, outputs, strict=True)])

    def _joined(
        self,
        req: TranslateRequest,
        detected: list[list[Detection]] | None,
        through: set[int],
        groups: dict[str, list[int]],
        decoded: list[tuple[Any, Any]],
    ) -> TranslateResponse:
        """The response: texts passed through as they came, the others joined from their sentences' outputs
        (`decoded`: per group, its texts' layouts and its batch output)."""
        results: list[Any] = [None] * len(req.items)
        for i in through:
            found = None if detected is None else detected[i]
            results[i] = TranslationResult.unchanged(
                req.items[i], req, DetectedLanguage.of(found[0]) if found else None
            )
        for (name, idxs), (lays, out) in zip(groups.items(), decoded, strict=True):
            for i, lay in zip(idxs, lays, strict=True):
                results[i] = r = self.translation[name].join(lay, out, req.num_hypotheses, req.return_scores)
                if detected is not None:  # additive fields: only when the language was detected
                    r.model, r.detected_language = name, DetectedLanguage.of(detected[i][0])
        model = ",".join([*groups, *([PASSTHROUGH] if through else [])])
        return TranslateResponse(model=model, results=results)

    async def attention(
        self, req: AttentionRequest, png: bool, disconnected: Disconnected = None
    ) -> tuple[bytes, str]:
        """The JSON body (AttentionResponse) or a PNG, with its media type."""
        if not png:
            return await self._attention(req, False, disconnected)
        with self.png.admit():  # 429 beyond a few PNG requests at once: each draws for long
            return await self._attention(req, True, disconnected)

    async def _attention(
        self, req: AttentionRequest, png: bool, disconnected: Disconnected
    ) -> tuple[bytes, str]:
        entry = self.ready_registry().get_any(req.model)
        if entry.package is not None:
            why = "run by CTranslate2 without torch weights: it has no attention maps to show"
            raise invalid(
                ("model",), f"{entry.name} is an Argos Translate package, {why}", "unsupported_model"
            )
        self.limits.check_texts([req.text], "text")
        if req.target is not None:
            self.limits.check_texts([req.target], "target")
        handler = self.attention_handlers[entry.name]
        sel = handler.select(req.layers, req.heads)
        if png and handler.is_translator and not sel.decoder:  # its PNG shows cross-attention
            raise invalid(
                ("layers",),
                f"the PNG of a translator shows cross-attention: select a decoder layer "
                f"(0..{handler.decoder_layers - 1})",
            )
        deadline = self._deadline()
        item, translation = await self._attention_item(entry, handler, req, deadline, disconnected)
        handler.check_size(item, sel)  # the target is known now (given or translated)
        maps_batcher = self.queues.attention(entry.name, handler)
        [[maps]] = await self._submit([(maps_batcher, [item])], deadline, disconnected)
        return await self._attention_body(handler, item, maps, sel, translation, png, deadline)

    async def _attention_item(
        self,
        entry: ModelEntry,
        handler: AttentionHandler,
        req: AttentionRequest,
        deadline: float,
        disconnected: Disconnected,
    ) -> tuple[AttentionItem, str | None]:
        """The model inputs (for a translator without a target: its greedy translation's), and that
        translation."""
        item = handler.source(req.text)
        if not handler.is_translator:
            if req.target is not None or req.target_lang is not None:
                field = "target" if req.target is not None else "target_lang"
                raise invalid(
                    (field,), f"only translation models take a {field}; {entry.name} is a {entry.task} model"
                )
            return item, None
        lang = self.ready_registry().target_lang(entry.name, req.target_lang)
        if req.target is not None:
            tagged = entry.config.source_prefix(lang) + item.source  # OPUS-MT ">>fra<<": what the model reads
            return AttentionItem(tagged, handler.decoder_input(req.target, lang)), None
        greedy = self.queues.translation(  # through the batcher, like /translate with beam_size=1
            entry.name, self.translation[entry.name], DecodeKey(lang, 1)
        )
        [[[best]]] = await self._submit([(greedy, [Sentence(item.source)])], deadline, disconnected)
        tagged = entry.config.source_prefix(lang) + item.source  # the tag is part of what the model reads
        return AttentionItem(tagged, [entry.config.start_id(lang), *best.tokens]), best.text

    async def _attention_body(
        self,
        handler: AttentionHandler,
        item: AttentionItem,
        maps: Any,
        sel: LayerSelection,
        translation: str | None,
        png: bool,
        deadline: float,
    ) -> tuple[bytes, str]:
        """Megabytes of JSON (or a rendered PNG) for a long text: built off the event loop, and still
        answered 504 past the deadline."""
        if png:
            body, media = await self.png.render(handler, item, maps, sel), "image/png"
        else:
            body = await asyncio.to_thread(handler.encode_json, item, maps, sel, translation)
            media = "application/json"
        if asyncio.get_running_loop().time() > deadline:
            raise DeadlineExceeded.after(self.settings.request_timeout_s)
        return body, media

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.settings.request_timeout_s

    async def _submit(
        self, jobs: list[Job], deadline: float, disconnected: Disconnected, field: str = "text"
    ) -> list[list[Any]]:
        """Enqueue each (batcher, items) job and wait for all results, the deadline, or the client leaving.
        422 when the request's work exceeds APP_MAX_WORK or a model's queue could never hold it."""
        futures: list[asyncio.Future[list[Any]]] = []
        costs = [batcher.costs(items) for batcher, items in jobs]
        queues = [(len(items), batcher.queue.max_items) for batcher, items in jobs]
        self.limits.check_jobs(sum(map(sum, costs)), queues, field)
        try:
            for (batcher, items), item_costs in zip(jobs, costs, strict=True):
                futures.append(batcher.enqueue(items, deadline, item_costs))
            return await wait_all(futures, deadline, disconnected, self.settings.request_timeout_s)
        finally:
            for f in futures:  # no-op when done; otherwise the batch loop skips the items
                f.cancel()

"""POST /translate (and the LibreTranslate API) as a task: texts -> detected languages (source_lang auto) ->
passed through or routed to a model -> sentences -> source ids, priced -> n-best hypotheses per sentence ->
texts joined back. Its kinds: the torch TranslationHandler, CTranslate2 (APP_TRANSLATION_ENGINE) and Argos
Translate packages, chosen per model at load."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from app.core.columns import F64, I32, U8, BadFrame, Reader, Writer, split
from app.core.settings import Settings
from app.glossaries.store import stored_glossary
from app.schemas import AUTO, DetectedLanguage, TranslateRequest, TranslateResponse, TranslationResult
from app.tasks.handlers import DecodeKey, Sentence, TranslationText
from app.tasks.task import BatchSpec, Context, Disconnected, Job, Task
from app.tasks.translation_routes import TASK, translation_routes
from app.tasks.wire import NO_LIMIT, Wire, read_runs, write_runs
from app.text.langid import Detection
from app.text.passthrough import PASSTHROUGH, passed
from app.text.sentences import split_sentences
from model import Tokenizer
from model.files import load_tokenizer
from model.glossary import Glossary
from model.options import Hypothesis

if TYPE_CHECKING:
    import torch

    from app.registry import ModelEntry, Registry
    from app.tasks.handlers import TranslationHandler
    from model import LoadedModel

log = logging.getLogger(__name__)


class Sentences:
    """A translator's items between processes: Sentences without their text side (`source` stays where the
    answer runs: the model process reads ids, options, `align` and `passes`)."""

    def fits(self, values: list[Any]) -> bool:
        return all(type(v) is Sentence and type(v.ids) is list for v in values)

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items: list[Sentence] = [item for job in jobs for item in job]
        write_runs(w, [s.ids for s in items])
        w.column([s.num_hypotheses for s in items], I32)
        w.column([s.length_penalty for s in items], F64)
        w.column([NO_LIMIT if s.max_length is None else s.max_length for s in items], I32)
        w.column([s.align for s in items], U8)
        w.column([s.passes for s in items], U8)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        n = sum(sizes)
        ids = read_runs(r, n)
        columns = (r.column(I32, n), r.column(F64, n), r.column(I32, n), r.column(U8, n), r.column(U8, n))
        items = [
            Sentence(s, k, lp, None if ml == NO_LIMIT else ml, a, bool(p))
            for s, k, lp, ml, a, p in zip(ids, *columns, strict=True)
        ]
        return split(items, sizes)


class DecodeKeys:
    """A DecodeKey as its beam size and its target language."""

    def fits(self, key: Hashable) -> bool:
        return type(key) is DecodeKey and type(key.target_lang) is str and type(key.beam_size) is int

    def number(self, key: Hashable) -> int:
        assert isinstance(key, DecodeKey)
        return key.beam_size

    def string(self, key: Hashable) -> str:
        assert isinstance(key, DecodeKey)
        return key.target_lang

    def key(self, number: int, string: str) -> Hashable:
        if number < 1:
            raise BadFrame(f"a beam size of {number}")
        return DecodeKey(string, number)


class Hypotheses:
    """A translator's outputs: per sentence its n-best Hypothesis list (token ids, scores, alignments)."""

    def fits(self, values: list[Any]) -> bool:
        for hyps in values:
            if type(hyps) is not list:
                return False
            for h in hyps:
                if type(h) is not Hypothesis or type(h.tokens) is not list:
                    return False
                if h.alignment is not None and type(h.alignment) is not list:
                    return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        n_best: list[list[Hypothesis]] = [hyps for job in jobs for hyps in job]
        hyps = [h for n in n_best for h in n]
        w.column([len(n) for n in n_best], I32)
        write_runs(w, [h.tokens for h in hyps])
        w.column([h.score for h in hyps], F64)
        w.column([h.log_prob for h in hyps], F64)
        w.column([NO_LIMIT if h.alignment is None else len(h.alignment) for h in hyps], I32)
        w.column([p for h in hyps if h.alignment is not None for p in h.alignment], I32)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        counts = r.column(I32, sum(sizes))
        n = sum(counts)
        tokens = read_runs(r, n)
        scores, log_probs, aligned = r.column(F64, n), r.column(F64, n), r.column(I32, n)
        if min(aligned, default=0) < NO_LIMIT:
            raise BadFrame("an alignment of negative length")
        found = iter(split(r.column(I32), [a for a in aligned if a != NO_LIMIT]))
        hyps = [
            Hypothesis(t, s, lp, None if a == NO_LIMIT else next(found))
            for t, s, lp, a in zip(tokens, scores, log_probs, aligned, strict=True)
        ]
        return split(split(hyps, counts), sizes)


class TranslationTask(Task):
    name = "translation"
    expensive = True
    splits = True  # an HTTP process detects, splits, tokenizes and joins; the model process decodes
    wire = Wire(Sentences(), DecodeKeys(), Hypotheses())  # source ids and options in, n-best lists out

    def __init__(self) -> None:
        super().__init__()
        self._ct2_kwargs: dict[str, Any] | None = None  # None: the torch engine
        self._argos_kwargs: dict[str, Any] | None = None
        self._device: torch.device | None = None  # the registry's, set by prepare
        self._dtype: torch.dtype | None = None

    def serves(self, entry: ModelEntry) -> bool:
        return entry.task == TASK

    def routing(self, settings: Settings, registry: Registry) -> dict[str, str]:
        return translation_routes(settings, registry).table()

    def languages(self, settings: Settings, registry: Registry) -> set[str]:
        """Sources and targets (a text already in the target passes through)."""
        return translation_routes(settings, registry).pair_languages

    def prepare(self, settings: Settings, registry: Registry) -> None:
        super().prepare(settings, registry)
        self._device, self._dtype = registry.device, registry.dtype
        self._ct2_kwargs = settings.ctranslate2_kwargs(self._device, self._dtype)
        if any(e.package is not None for e in registry.entries.values()):  # Argos: CTranslate2 only
            self._argos(settings)  # at start: no ctranslate2 fails start-up, not the model

    def _argos(self, settings: Settings) -> dict[str, Any]:
        """An Argos package's CTranslate2 arguments (SettingsError without ctranslate2: its load fails)."""
        if self._argos_kwargs is None:
            assert self._device is not None
            self._argos_kwargs = settings.ctranslate2_kwargs(self._device, self._dtype, always=True)
        return self._argos_kwargs

    def load(self, entry: ModelEntry, loaded: LoadedModel | None) -> TranslationHandler:
        from app.tasks.argos import ArgosTranslationHandler  # the kinds import torch: the text half none
        from app.tasks.ctranslate2 import CT2TranslationHandler
        from app.tasks.handlers import TranslationHandler

        assert self.settings is not None
        if entry.package is not None:  # an Argos package: CTranslate2, no torch model
            return ArgosTranslationHandler(entry.name, entry.package, self._argos(self.settings))
        assert loaded is not None
        if self._ct2_kwargs is not None:
            try:
                return CT2TranslationHandler(loaded, self.settings.graphs_at_load(), self._ct2_kwargs)
            except Exception as e:
                if self.settings.translation_engine != "auto":  # asked for: the model fails, saying why
                    raise
                # auto: a model CTranslate2 cannot take is decoded by torch, the same answers
                log.warning("%s: CTranslate2 cannot load it (%s): the torch engine decodes it", entry.name, e)
        return TranslationHandler(loaded, self.settings.graphs_at_load())

    def load_text(self, entry: ModelEntry) -> TranslationText:
        """The tokenizer only: an Argos package's sentencepiece model, or the checkpoint's (pair) tokenizer."""
        if entry.package is not None:
            return TranslationText(entry.name, Tokenizer(entry.package.tokenizer_path), entry.config)
        return TranslationText(entry.name, load_tokenizer(entry.path, entry.meta, entry.config), entry.config)

    def engine(self, entry: ModelEntry) -> str | None:
        if not self.serves(entry):
            return None
        return "ctranslate2" if entry.package is not None or self._ct2_kwargs is not None else None

    def batching(self, model: str, key: Hashable) -> BatchSpec:
        """One queue per model, target language and beam size (other options are per sentence)."""
        assert isinstance(key, DecodeKey)
        name = f"{model}:{key.target_lang}:beam{key.beam_size}"
        return BatchSpec(name, expensive=True, stoppable=True, dynamic=True)

    async def answer(
        self,
        ctx: Context,
        req: TranslateRequest,
        disconnected: Disconnected = None,
        *,
        max_texts: int | None = None,
        field: str | None = None,
        **options: Any,
    ) -> TranslateResponse:
        """Texts grouped by model (one group unless source_lang is auto and the texts' languages differ).
        max_texts: instead of APP_MAX_TEXTS (the LibreTranslate API sends the text nodes of HTML documents
        whose count it has checked); field: what a 422 names instead of the request's field ("file": the
        texts of an uploaded file)."""
        registry, (texts, own) = ctx.ready_registry(), req.inputs
        field = field or own
        ctx.limits.check_texts(texts, field, max_texts)
        terms, stored = req.glossary, None
        if req.glossary_id is not None:  # a stored glossary: its pair checked (its source after detection)
            stored = await stored_glossary(ctx.settings, req.glossary_id, req.source_lang, req.target_lang)
            terms = stored.entries
        ctx.limits.check_glossary(terms, "glossary" if stored is None else "glossary_id")
        detected = await ctx.detect(texts, field) if req.source_lang == AUTO else None
        # each text's language (None: no letters); texts answered as they came: app/text/passthrough.py
        langs = (
            [req.source_lang] * len(texts)
            if detected is None
            else [f[0].language if f else None for f in detected]
        )
        through = set(passed(texts, langs, req.target_lang))
        if stored is not None and detected is not None:
            stored.check_detected(langs, [i for i in range(len(texts)) if i not in through], field)
        groups = translation_routes(ctx.settings, registry).route(req, texts, field, detected, through)
        key = DecodeKey(req.target_lang, req.beam_size)  # the queue; the other options go per sentence
        split = [  # each text as lines of sentences, in its language: split once, priced, then tokenized
            [] if i in through else split_sentences(text, langs[i] or req.source_lang)
            for i, text in enumerate(texts)
        ]
        handlers = {name: self.handlers[name] for name in groups}  # a reload swaps self.handlers
        floor = 0  # far over budget is refused before tokenizing (a hostile loop costs the split only)
        for name, idxs in groups.items():
            sentences = sum(len(line) for i in idxs for line in split[i])
            floor += sentences * handlers[name].least_cost(key, req.max_length)
        ctx.limits.check_work(floor, field, "at least ")
        jobs: list[Job] = []
        layouts = []
        glossary = Glossary.of(terms) if terms else None  # its targets stay in this process
        for name, idxs in groups.items():
            handler, rows = handlers[name], [split[i] for i in idxs]
            options = (req.num_hypotheses, idxs, req.length_penalty, req.max_length, req.replace_unknowns)
            items, lays = handler.sentences(rows, field, *options, glossary)
            jobs.append(Job(self, name, key, items, handler.costs(items, key)))
            layouts.append(lays)
        outputs = await ctx.submit(jobs, disconnected, field) if jobs else []
        outputs = [handlers[j.model].texts(j.items, out) for j, out in zip(jobs, outputs, strict=True)]
        decoded = [*zip(layouts, outputs, strict=True)]
        return self._joined(req, texts, detected, through, groups, handlers, decoded)

    def _joined(
        self,
        req: TranslateRequest,
        texts: list[str],
        detected: list[list[Detection]] | None,
        through: set[int],
        groups: dict[str, list[int]],
        handlers: dict[str, TranslationText],
        decoded: list[tuple[Any, Any]],
    ) -> TranslateResponse:
        """The response: texts passed through as they came, the others joined from their sentences' outputs
        (`decoded`: per group, its texts' layouts and its batch output)."""
        results: list[Any] = [None] * len(texts)
        for i in through:
            found = None if detected is None else detected[i]
            results[i] = TranslationResult.unchanged(
                texts[i], req, DetectedLanguage.of(found[0]) if found else None
            )
        for (name, idxs), (lays, out) in zip(groups.items(), decoded, strict=True):
            for i, lay in zip(idxs, lays, strict=True):
                results[i] = r = handlers[name].join(lay, out, req.num_hypotheses, req.return_scores)
                if detected is not None:  # additive fields: only when the language was detected
                    r.model, r.detected_language = name, DetectedLanguage.of(detected[i][0])
        model = ",".join([*groups, *([PASSTHROUGH] if through else [])])
        return TranslateResponse(model=model, results=results)

"""POST /sentiment as a task: texts routed by language (or the request's model) -> token ids -> class
probabilities -> one result per text. Its kinds: the text half (SentimentText: tokenizer and labels, what an
HTTP process runs) and the torch classifier (SentimentHandler), here beside the task that uses them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from app.core.columns import I64, U8, Reader, Writer, split
from app.schemas import SentimentRequest, SentimentResponse, SentimentResult
from app.tasks.sentiment_routes import TASK, models_for, sentiment_routes
from app.tasks.task import Context, Disconnected, Job, Task, compile_or_stay_eager
from app.tasks.wire import FloatRows, NoKeys, Wire, read_runs, write_runs
from model.config import ModelConfig
from model.files import load_tokenizer
from model.ngram_text import NO_NGRAM, NgramText, ngram_text
from model.preprocess import classifier_ids
from model.tokenizer import Tokenizer

if TYPE_CHECKING:
    from app.core.settings import Settings
    from app.registry import ModelEntry, Registry
    from model import LoadedModel
    from model.inference import ClassifierGraph

R = TypeVar("R")
WARMUP_TEXT = "warm up"
# token ids and the text as an n-gram head reads it: its NgramText (from an HTTP process), the text itself (in
# the process that runs the model), NO_NGRAM without a head
ClassifierItem = tuple[list[int], NgramText | str]


class ClassifierItems:
    """A classifier's items between processes: (ids, the text as its n-gram head reads it, NO_NGRAM without
    one): the text's per-word work is done where it was tokenized, not on the thread that runs the batch."""

    def fits(self, values: list[Any]) -> bool:
        for v in values:
            if not (type(v) is tuple and len(v) == 2 and type(v[0]) is list and type(v[1]) is NgramText):
                return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items = [item for job in jobs for item in job]
        write_runs(w, [ids for ids, _ in items])
        ngrams = any(ngram is not NO_NGRAM for _, ngram in items)  # else (most models) no columns for them
        w.column([ngrams], U8)
        if ngrams:
            write_runs(w, [ngram.words for _, ngram in items], I64)  # crc32s: unsigned 32-bit
            w.strings(ngram.padded for _, ngram in items)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        n = sum(sizes)
        ids = read_runs(r, n)
        if not r.column(U8, 1)[0]:
            return split([(i, NO_NGRAM) for i in ids], sizes)
        words, padded = read_runs(r, n, I64), r.strings(n)
        return split([(i, NgramText(w, p)) for i, w, p in zip(ids, words, padded, strict=True)], sizes)


class SentimentTask(Task):
    name = "sentiment"
    splits = True  # an HTTP process tokenizes and builds the results; the model process runs the batches
    wire = Wire(ClassifierItems(), NoKeys(), FloatRows())  # ids (and texts) in, class probabilities out

    def serves(self, entry: ModelEntry) -> bool:
        return entry.task == TASK

    def routing(self, settings: Settings, registry: Registry) -> dict[str, str]:
        return dict(sorted(sentiment_routes(registry).by_lang.items()))

    def languages(self, settings: Settings, registry: Registry) -> set[str]:
        return set(sentiment_routes(registry).by_lang)

    def load(self, entry: ModelEntry, loaded: LoadedModel | None) -> SentimentHandler:
        assert loaded is not None
        assert self.settings is not None
        # its graph at load even with APP_TORCHSCRIPT_AFTER_READY: a tenth of a translator's tracing, and
        # eager batches hold the GIL op by op (half the throughput while a server waits for it)
        return SentimentHandler(loaded, self.settings.torchscript)

    def load_text(self, entry: ModelEntry) -> SentimentText:
        tokenizer = load_tokenizer(entry.path, entry.meta, entry.config)
        assert isinstance(tokenizer, Tokenizer)
        return SentimentText(entry.name, tokenizer, entry.config)

    async def answer(
        self, ctx: Context, req: SentimentRequest, disconnected: Disconnected = None, **options: Any
    ) -> SentimentResponse:
        """Request -> items (limits, a model per text, token ids), one submit, outputs -> results."""
        registry, (texts, field) = ctx.ready_registry(), req.inputs
        ctx.limits.check_texts(texts, field)
        groups = group_by_model(models_for(registry, texts, req.model))
        jobs, handlers = [], {name: self.handlers[name] for name in groups}  # a reload swaps self.handlers
        for name, idxs in groups.items():
            handler = handlers[name]
            items = [handler.tokenize(texts[i]) for i in idxs]
            jobs.append(Job(self, name, None, items, handler.costs(items)))
        outputs = await ctx.submit(jobs, disconnected, field)
        results = [handlers[name].result(probs) for name, probs in scatter(groups, outputs)]
        return SentimentResponse.model_construct(model=",".join(groups), results=results)  # built here: valid


def group_by_model(models: list[str]) -> dict[str, list[int]]:
    """Model -> the indices of its texts, models in first-appearance order."""
    groups: dict[str, list[int]] = {}
    for i, model in enumerate(models):
        groups.setdefault(model, []).append(i)
    return groups


def scatter(groups: dict[str, list[int]], outputs: list[list[R]]) -> list[tuple[str, R]]:
    """Per text, in request order: its model and its output (`outputs`: per group, one per text)."""
    placed: list[Any] = [None] * sum(map(len, groups.values()))
    for (name, idxs), outs in zip(groups.items(), outputs, strict=True):
        for i, out in zip(idxs, outs, strict=True):
            placed[i] = (name, out)
    return placed


class SentimentText:
    """The text half of a classifier: text -> [CLS]? ids + EOS (`tokenize`), probabilities -> result
    (`result`). No weights: an HTTP process (app.parallel.remote) runs it beside the model process's
    SentimentHandler, which is one too."""

    # an n-gram head's words split where the text is tokenized, off the thread that runs the batch: in an HTTP
    # process, whose work spreads over several (SentimentHandler leaves them to its batches)
    split_words = True

    def __init__(self, name: str, tokenizer: Tokenizer, cfg: ModelConfig) -> None:
        self.name, self.tokenizer, self.cfg = name, tokenizer, cfg
        self.labels = list(cfg.labels)
        self._texts = bool(cfg.ngram)  # an n-gram head hashes the text itself: its words go with the ids

    def tokenize(self, text: str) -> ClassifierItem:
        ids = classifier_ids(self.tokenizer, text, self.cfg)  # truncated to max_len like training
        if not self._texts:
            return ids, NO_NGRAM
        return ids, ngram_text(text) if self.split_words else text

    def costs(self, items: list[ClassifierItem]) -> list[int]:
        """Work units: each item's tokens."""
        return [len(ids) for ids, _ in items]

    def result(self, probs: list[float]) -> SentimentResult:
        best = max(range(len(probs)), key=probs.__getitem__)
        return SentimentResult.model_construct(  # no validation: every field is built right here
            model=self.name,
            label=self.labels[best],
            score=probs[best],
            probabilities=dict(zip(self.labels, probs, strict=True)),
        )


class SentimentHandler(SentimentText):
    """Text -> [CLS]? ids + EOS -> class probabilities."""

    # one process: its event loop tokenizes every request and holds the throughput, its batches hash the words
    # (model.ngram.text_units); split here, the loop's extra work shrank the batches (BENCHMARKS.md)
    split_words = False

    def __init__(self, loaded: LoadedModel, torchscript: bool = True) -> None:
        """torchscript: build the graph now (`compile`); else eager until `compile` runs (app.runtime.lifecycle:
        after ready) or for good."""
        from model.classifier import SentimentClassifier  # torch: the text half above needs none

        assert isinstance(loaded.model, SentimentClassifier)
        assert isinstance(loaded.tokenizer, Tokenizer)
        super().__init__(loaded.name, loaded.tokenizer, loaded.model.cfg)
        self.model = loaded.model
        # one graph call per batch keeps the GIL free while it runs (see ClassifierGraph): built off the loop
        self._graph: ClassifierGraph | None = None
        if torchscript:
            compile_or_stay_eager(self)

    def compile(self) -> None:
        """Build the batch graph (model.jit.compile_classifier, checked against eager there), run a warm-up
        batch through it, then run batches on it: one already running keeps the eager path."""
        from model.jit import compile_classifier

        graph = compile_classifier(self.model)
        self._run([self.tokenize(WARMUP_TEXT)], graph)
        self._graph = graph

    @property
    def compiled(self) -> bool:
        """Whether batches run the graph."""
        return self._graph is not None

    def run(self, items: list[ClassifierItem]) -> list[list[float]]:
        """Class probabilities per item; classify_ids sorts by length and pads (B, S) per length bucket."""
        return self._run(items, self._graph)

    def _run(self, items: list[ClassifierItem], graph: ClassifierGraph | None) -> list[list[float]]:
        import torch

        from model.inference import classify_ids

        ids, texts = [i for i, _ in items], [t for _, t in items]  # texts: an n-gram head hashes their words
        with torch.inference_mode():
            return classify_ids(self.model, ids, max(1, len(items)), graph, texts).tolist()  # (N, C)

    def warmup(self) -> None:
        self.run([self.tokenize(WARMUP_TEXT)])

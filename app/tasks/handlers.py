"""The torch kind of the translation task (app/tasks/translation.py): what a task object does with one model
around its batcher. The sentiment task's kinds are in its own module (app/tasks/sentiment.py).

Each handler (these, SentimentHandler and attention_maps.AttentionHandler) has `run(items) -> results`: the one call its
Batcher makes, in an inference worker, on one dynamic batch (results in item order, one per item), and
`costs(items)`: their work units, what admission and batch cutting count (the task prices a job's items with it
as it makes them: app.tasks.task.Job.costs). The rest runs on the event loop
and is named for what it does: a request's texts become batch items (`tokenize`, `sentences`), results become
response schemas (`result`, `join`). Model calls go through model.inference, the code path shared with the
evaluate CLI. The text halves (TranslationText, sentiment.SentimentText) import no torch: an HTTP process runs them
(app/parallel/remote.py); the handlers import the model code in the methods that load and run a model.

A work unit is one token through a model: a classifier item costs its tokens; a translated sentence costs its
source tokens (the encoder) plus beam_size x its output length limit (decoder token-steps: the most its
decoding can take, EOS forced at the limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.errors import invalid
from app.schemas import DEFAULT_LENGTH_PENALTY, ScoredTranslation, TranslationResult
from app.tasks.task import compile_or_stay_eager
from app.text.passthrough import has_letters
from model.config import ModelConfig
from model.glossary import Glossary
from model.options import DecodeOptions, DecodingStopped, Hypothesis
from model.preprocess import source_ids
from model.tokenizer import PairTokenizer, Tokenizer
from model.unknowns import Source, encode_source, restore_hypothesis

if TYPE_CHECKING:
    from engines.ct2_decode import CT2Decoder
    from model import LoadedModel
    from model.decoding import Decodable, StopCheck

WARMUP_TEXT = "warm up"


def uncut_length(tokenizer: Tokenizer, text: str, ids: list[int], max_len: int, specials: int) -> int | None:
    """The token count of `text` plus its `specials` (EOS, start) when `ids` (built from it) were cut at
    max_len, else None: the text is encoded again only when it may have been cut."""
    if len(ids) == max_len and (n := len(tokenizer.encode(text)) + specials) > max_len:
        return n
    return None


def _too_long(name: str, cfg: ModelConfig, text: str, n: int, loc: Sequence[str | int]) -> Exception:
    return invalid(
        loc,
        f"a sentence of {n} tokens exceeds the {cfg.max_source_len}-token limit of {name} (EOS included): "
        f"{text[:60]!r}",
    )


def checked_source_ids(
    name: str, tokenizer: Tokenizer, cfg: ModelConfig, text: str, loc: Sequence[str | int]
) -> list[int]:
    """Translator source ids (pieces + EOS); 422 naming the limit when they do not fit max_len (less a
    source-side target tag's position)."""
    ids = source_ids(tokenizer, text, cfg)
    if n := uncut_length(tokenizer, text, ids, cfg.max_source_len, 1):
        raise _too_long(name, cfg, text, n, loc)
    return ids


def checked_source(
    name: str,
    tokenizer: Tokenizer,
    cfg: ModelConfig,
    text: str,
    loc: Sequence[str | int],
    glossary: Glossary | None = None,
) -> Source:
    """`checked_source_ids` for unknown-token replacement: model.unknowns.encode_source's ids and surfaces
    (with the glossary's terms: model/glossary.py)."""
    src = encode_source(tokenizer, text, cfg, cut=False, glossary=glossary)
    if len(src.ids) > cfg.max_source_len:
        raise _too_long(name, cfg, text, len(src.ids), loc)
    return src


@dataclass(frozen=True)
class DecodeKey:
    """What must be equal within one batch (a translation queue's key): the start token and the beam size
    (rows per sentence). The options that change no tensor shape are per sentence (Sentence)."""

    target_lang: str
    beam_size: int

    def work(self, sentence: Sentence, max_len: int) -> int:
        """A sentence's work units under this beam size and its own length limit, for a translator of
        max_len positions."""
        n = len(sentence.ids)
        return n + self.beam_size * min(sentence.options(self.beam_size, max_len).limit(n), max_len)


@dataclass(frozen=True)
class Sentence:
    """One batch item: a sentence's source ids (EOS included) and its request's per-row decoding options:
    n-best count, length penalty, length limit (None: the default ratio, within the model's max_len).
    `source`, its text side, stays where the request's answer runs: between processes only the rest crosses
    (TranslationTask.wire), and the model process reads none of it."""

    ids: list[int]
    num_hypotheses: int = 1
    length_penalty: float = DEFAULT_LENGTH_PENALTY
    max_length: int | None = None
    align: int = 0  # which hypotheses get an alignment (model.unknowns.needs_alignment)
    passes: bool = False  # nothing to translate: answered as it came (source.verbatim), no model call
    # the source surfaces (output <unk>s are replaced from them), the items taken out and the verbatim text
    source: Source | None = None

    def __reduce__(self) -> tuple[type[Sentence], tuple[Any, ...]]:
        """Pickled (a frame's fallback) without `source`, as in a compact frame: the text side never leaves
        its process (copy.copy drops it too)."""
        return Sentence, (
            self.ids,
            self.num_hypotheses,
            self.length_penalty,
            self.max_length,
            self.align,
            self.passes,
        )

    def options(self, beam_size: int, max_len: int) -> DecodeOptions:
        """DecodeOptions; an explicit max_length is absolute, and no limit passes the model's max_len."""
        if self.max_length is None:
            return DecodeOptions(
                beam_size, min(DecodeOptions.max_length, max_len), length_penalty=self.length_penalty,
                num_hypotheses=self.num_hypotheses,
            )  # fmt: skip
        limit = min(self.max_length, max_len)
        return DecodeOptions(
            beam_size, limit, max_length_ratio=0.0, max_length_offset=limit,
            length_penalty=self.length_penalty, num_hypotheses=self.num_hypotheses,
        )  # fmt: skip


@dataclass(frozen=True)
class SentenceTranslation:
    """One of a sentence's n-best translations (detokenized), its score and its tokens."""

    text: str
    score: float
    tokens: list[int]
    passed: bool = False  # a sentence with nothing to translate, answered as it came (no score of its own)


@dataclass(frozen=True)
class TextLayout:
    """Where each sentence of one text goes back: lines of indices into the request's sentence list."""

    lines: list[list[int]]


class TranslationText:
    """The text half of a translator: text -> sentences -> source ids (`sentences`, priced by `least_cost`),
    each sentence's hypotheses (`run`'s outputs: token ids and scores) -> its texts (`texts`: detokenized) ->
    a text joined back (`join`). No weights: an HTTP process (app.parallel.remote) runs it beside the model
    process's TranslationHandler, which is one too."""

    def __init__(self, name: str, tokenizer: Tokenizer | PairTokenizer, cfg: ModelConfig) -> None:
        self.name, self.tokenizer, self.cfg, self.max_len = name, tokenizer, cfg, cfg.max_len

    def costs(self, items: Sequence[Sentence], key: DecodeKey) -> list[int]:
        """Work units of each sentence decoded under `key`."""
        return [key.work(item, self.max_len) for item in items]

    def least_cost(self, key: DecodeKey, max_length: int | None = None) -> int:
        """The least a sentence can cost under `key` and `max_length` (one token: its EOS), known before
        tokenizing."""
        return key.work(Sentence([0], max_length=max_length), self.max_len)

    def encode_source(self, text: str, loc: Sequence[str | int]) -> list[int]:
        return checked_source_ids(self.name, self.tokenizer, self.cfg, text, loc)

    def sentence(
        self,
        text: str,
        loc: Sequence[str | int],
        replace_unknowns: bool,
        glossary: Glossary | None,
        *options: Any,
    ) -> Sentence:
        """One batch item (options: Sentence's num_hypotheses, length_penalty, max_length); replace_unknowns:
        model.unknowns' encoding (protected items taken out, the glossary's terms marked), and surfaces to
        replace <unk>s from. A sentence without letters ("7", "2.", "15 €") passes through as it came."""
        if not has_letters(text):
            eos = [self.cfg.eos_id]
            return Sentence(eos, *options, passes=True, source=Source(eos, ("",), verbatim=text))
        if not replace_unknowns:
            return Sentence(self.encode_source(text, loc), *options)
        src = checked_source(self.name, self.tokenizer, self.cfg, text, loc, glossary)  # refused if too long
        return Sentence(src.ids, *options, align=src.align, passes=src.verbatim is not None, source=src)

    def sentences(
        self,
        texts: Sequence[list[list[str]]],
        field: str,
        num_hypotheses: int,
        indices: Sequence[int] | None = None,
        length_penalty: float = DEFAULT_LENGTH_PENALTY,
        max_length: int | None = None,
        replace_unknowns: bool = False,
        glossary: Glossary | None = None,
    ) -> tuple[list[Sentence], list[TextLayout]]:
        """Every sentence of every text (each split into lines of sentences: app.text.sentences.split_sentences) as
        one item with the request's decoding options, plus the layouts to put the texts back together;
        `indices`: the texts' places in the request (for error locations), default 0, 1, ...; replace_unknowns,
        glossary: see `sentence`."""
        items: list[Sentence] = []
        layouts = []
        for t, text in zip(indices or range(len(texts)), texts, strict=True):
            loc: tuple[str | int, ...] = (field, t) if field == "texts" else (field,)
            lines = []
            for sentences in text:
                lines.append(list(range(len(items), len(items) + len(sentences))))
                options = (num_hypotheses, length_penalty, max_length)
                items += [self.sentence(s, loc, replace_unknowns, glossary, *options) for s in sentences]
            layouts.append(TextLayout(lines))
        return items, layouts

    def texts(
        self, items: Sequence[Sentence], outputs: Sequence[list[Hypothesis]]
    ) -> list[list[SentenceTranslation]]:
        """Each sentence's n-best (`run`'s outputs for `items`), detokenized; a sentence with nothing to
        translate as it came."""
        results = []
        for s, hyps in zip(items, outputs, strict=True):
            if s.passes:
                verbatim = s.source.verbatim if s.source is not None else None
                assert verbatim is not None  # a sentence that passes keeps its text where `answer` runs
                results.append([SentenceTranslation(verbatim, 0.0, [], passed=True)])
            else:
                results.append([SentenceTranslation(self.detokenize(h, s), h.score, h.tokens) for h in hyps])
        return results

    def detokenize(self, hyp: Hypothesis, item: Sentence) -> str:
        """The hypothesis' text: its <unk>s replaced, the items taken out put back and the glossary's terms
        written (with replacement on)."""
        if (src := item.source) is None:
            return self.tokenizer.decode(hyp.tokens)
        return restore_hypothesis(
            self.tokenizer, hyp, item.ids, src.surfaces, src.items, controls=src.controls, terms=src.terms
        )

    def join(
        self, layout: TextLayout, outputs: list[list[SentenceTranslation]], n: int, return_scores: bool
    ) -> TranslationResult:
        """Hypothesis k of a text joins hypothesis k of each sentence (a sentence with fewer repeats its
        last); its score is their mean. Up to n distinct texts: a beam can end with fewer hypotheses than
        asked (e.g. EOS forced at max_length 1), and two token sequences can read alike."""
        available = max((len(outputs[i]) for line in layout.lines for i in line), default=1)
        hyps: list[ScoredTranslation] = []
        for k in range(min(n, available)):
            lines, scores = [], []
            for line in layout.lines:
                picks = [outputs[i][min(k, len(outputs[i]) - 1)] for i in line]
                lines.append(" ".join(p.text for p in picks))
                scores += [p.score for p in picks if not p.passed]
            text = "\n".join(lines)
            if all(h.translation != text for h in hyps):
                hyps.append(ScoredTranslation(translation=text, score=sum(scores) / max(1, len(scores))))
        best = hyps[0]
        return TranslationResult(
            translation=best.translation,
            score=best.score if return_scores else None,
            hypotheses=hyps if n > 1 else None,
        )


class TranslationHandler(TranslationText):
    """Text -> sentences -> source ids -> n-best hypotheses -> text joined back."""

    def __init__(self, loaded: LoadedModel, torchscript: bool = True) -> None:
        """torchscript: trace the graphs now (`compile`); else it decodes with the eager model until
        `compile` runs (app.runtime.lifecycle: after ready) or for good. /attention keeps the eager path, which
        returns every attention map."""
        from model.translator import Translator  # torch: the text half above needs none

        assert isinstance(loaded.model, Translator)
        self.name, self.model, self.tokenizer = loaded.name, loaded.model, loaded.tokenizer
        self.decoder: Decodable[Any] = self.model  # the traced graphs once `compile` has run
        self.cfg = loaded.config
        self.max_len = loaded.config.max_len
        self.engine: CT2Decoder | None = None  # CTranslate2 decodes instead (app.tasks.ctranslate2, .argos)
        if torchscript:
            compile_or_stay_eager(self)

    def compile(self) -> None:
        """Trace the encoder and decoder-step graphs (model.jit.trace_translator), run a warm-up batch
        through them, then decode with them: a batch already running keeps the decoder it started with."""
        from model.jit import trace_translator

        decoder = trace_translator(self.model)
        self._warmup(decoder)
        self.decoder = decoder
        if self.engine is not None and self.engine.fallback is not None:
            self.engine.fallback = decoder

    @property
    def compiled(self) -> bool | None:
        """Whether decoding runs the traced graphs (None: a kind with none to build, e.g. Argos)."""
        return self.decoder is not self.model

    def run(
        self, items: list[Sentence], key: DecodeKey, should_stop: StopCheck = None
    ) -> list[list[Hypothesis]]:
        """Per item its own n-best (token ids, scores; `texts` detokenizes them, in the HTTP process when
        there are several) under its own options (length penalty, length limit, n-best count: per row in one
        batch; translate_ids sorts by length and pads per chunk); none for a sentence that passes through.
        should_stop: checked between decoder steps (True raises model.DecodingStopped)."""
        todo = [s for s in items if not s.passes]
        opts = [s.options(key.beam_size, self.max_len) for s in todo]
        want = [s.align for s in todo]
        output = iter(
            self.decode([s.ids for s in todo], opts, key.target_lang, should_stop, want) if todo else []
        )
        return [[] if s.passes else next(output)[: s.num_hypotheses] for s in items]

    def decode(
        self,
        seqs: list[list[int]],
        opts: Sequence[DecodeOptions],
        target_lang: str,
        should_stop: StopCheck = None,
        align_unknowns: Sequence[int] | None = None,
        decoder: Decodable[Any] | None = None,
    ) -> list[list[Hypothesis]]:
        """One dynamic batch of source ids, with options per item -> n-best hypotheses per item (the
        engine's part of `run`); align_unknowns: per item, which of its hypotheses get an `alignment`
        (model.unknowns.needs_alignment). should_stop: checked between decoder steps by torch, once before the batch by
        CTranslate2 (one call per distinct options decodes it). decoder: the torch decoder (default: the one
        in use)."""
        batch_size = max(1, len(seqs))
        if self.engine is not None and decoder is None:
            if should_stop is not None and should_stop():
                raise DecodingStopped(0)
            return self.engine.translate_per_row(seqs, opts, target_lang, align_unknowns)
        import torch

        from model.alignment import align
        from model.inference import translate_ids

        with torch.inference_mode():
            out = translate_ids(decoder or self.decoder, seqs, opts, target_lang, batch_size, should_stop)
            if align_unknowns is not None and any(align_unknowns):
                cfg = self.cfg
                align(self.model, seqs, out, cfg.start_id(target_lang), align_unknowns,
                      source_prefix=cfg.source_prefix(target_lang))  # fmt: skip
        return out

    def warmup(self) -> None:
        self._warmup(None)

    def _warmup(self, decoder: Decodable[Any] | None) -> None:
        """One beam-2 sentence of 4 tokens at most, through `decoder` (default: the one in use)."""
        ids = self.encode_source(WARMUP_TEXT, ("text",))
        opts = Sentence(ids, max_length=4).options(2, self.max_len)
        self.decode([ids], [opts], self.cfg.target_langs[0], decoder=decoder)

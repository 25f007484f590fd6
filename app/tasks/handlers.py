"""Per task, what the service does with a request around its batcher.

Each handler (and app.tasks.attention_maps.AttentionHandler) has `run(items) -> results`: the one call its
Batcher makes, in an inference worker, on one dynamic batch (results in item order, one per item), and
`cost(item)`: the item's work units, what admission and batch cutting count. The rest runs on the event loop
and is named for what it does: a request's texts become batch items (`tokenize`, `sentences`), results become
response schemas (`result`, `join`). Model calls go through model.inference, the code path shared with the
evaluate CLI.

A work unit is one token through a model: a classifier item costs its tokens; a translated sentence costs its
source tokens (the encoder) plus beam_size x its output length limit (decoder token-steps: the most its
decoding can take, EOS forced at the limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from app.core.errors import invalid
from app.schemas import ScoredTranslation, SentimentResult, TranslationResult
from model import (
    DecodeOptions,
    Hypothesis,
    LoadedModel,
    ModelConfig,
    SentimentClassifier,
    Tokenizer,
    Translator,
)
from model.decoding import Decodable, StopCheck
from model.inference import classify_ids, translate_ids
from model.jit import compile_classifier, trace_translator
from model.preprocess import classifier_ids, source_ids

WARMUP_TEXT = "warm up"
ClassifierItem = tuple[list[int], str]  # token ids and the text (for an n-gram head)


def uncut_length(tokenizer: Tokenizer, text: str, ids: list[int], max_len: int, specials: int) -> int | None:
    """The token count of `text` plus its `specials` (EOS, start) when `ids` (built from it) were cut at
    max_len, else None: the text is encoded again only when it may have been cut."""
    if len(ids) == max_len and (n := len(tokenizer.encode(text)) + specials) > max_len:
        return n
    return None


def checked_source_ids(
    name: str, tokenizer: Tokenizer, cfg: ModelConfig, text: str, loc: Sequence[str | int]
) -> list[int]:
    """Translator source ids (pieces + EOS); 422 naming the limit when they do not fit max_len (less a
    source-side target tag's position)."""
    ids = source_ids(tokenizer, text, cfg)
    if n := uncut_length(tokenizer, text, ids, cfg.max_source_len, 1):
        raise invalid(
            loc,
            f"a sentence of {n} tokens exceeds the {cfg.max_source_len}-token limit of {name} (EOS included): "
            f"{text[:60]!r}",
        )
    return ids


class SentimentHandler:
    """Text -> [CLS]? ids + EOS -> class probabilities."""

    def __init__(self, loaded: LoadedModel, torchscript: bool = True) -> None:
        assert isinstance(loaded.model, SentimentClassifier)
        self.name, self.model, self.tokenizer = loaded.name, loaded.model, loaded.tokenizer
        self.labels = list(loaded.config.labels)
        # one graph call per batch keeps the GIL free while it runs (see ClassifierGraph): built off the loop
        self._graph = compile_classifier(self.model) if torchscript else None

    def tokenize(self, text: str) -> ClassifierItem:
        ids = classifier_ids(self.tokenizer, text, self.model.cfg)  # truncated to max_len like training
        return ids, text

    def cost(self, item: ClassifierItem) -> int:
        """Work units: its tokens."""
        return len(item[0])

    def run(self, items: list[ClassifierItem]) -> list[list[float]]:
        """Class probabilities per item; classify_ids sorts by length and pads (B, S) per length bucket."""
        ids, texts = [i for i, _ in items], [t for _, t in items]  # texts: an n-gram head hashes them here
        with torch.inference_mode():
            return classify_ids(self.model, ids, max(1, len(items)), self._graph, texts).tolist()  # (N, C)

    def result(self, probs: list[float]) -> SentimentResult:
        best = max(range(len(probs)), key=probs.__getitem__)
        return SentimentResult.model_construct(  # no validation: every field is built right here
            model=self.name,
            label=self.labels[best],
            score=probs[best],
            probabilities=dict(zip(self.labels, probs, strict=True)),
        )

    def warmup(self) -> None:
        self.run([self.tokenize(WARMUP_TEXT)])


@dataclass(frozen=True)
class DecodeKey:
    """Options that must be equal within one forward pass (num_hypotheses may differ per item)."""

    target_lang: str
    beam_size: int
    length_penalty: float
    max_length: int | None

    def options(self, num_hypotheses: int, max_len: int) -> DecodeOptions:
        """DecodeOptions; an explicit max_length is absolute, and no limit passes the model's max_len."""
        if self.max_length is None:
            return DecodeOptions(
                self.beam_size, min(DecodeOptions.max_length, max_len), length_penalty=self.length_penalty,
                num_hypotheses=num_hypotheses,
            )  # fmt: skip
        limit = min(self.max_length, max_len)
        return DecodeOptions(
            self.beam_size, limit, max_length_ratio=0.0, max_length_offset=limit,
            length_penalty=self.length_penalty, num_hypotheses=num_hypotheses,
        )  # fmt: skip

    def work(self, sentence: Sentence, max_len: int) -> int:
        """A sentence's work units under these options, for a translator of max_len positions."""
        n = len(sentence.ids)
        return n + self.beam_size * min(self.options(1, max_len).limit(n), max_len)


@dataclass(frozen=True)
class Sentence:
    """One batch item: a sentence's source ids (EOS included) and how many hypotheses its request wants."""

    ids: list[int]
    num_hypotheses: int = 1


@dataclass(frozen=True)
class SentenceTranslation:
    """One of a sentence's n-best translations (detokenized), its score and its tokens."""

    text: str
    score: float
    tokens: list[int]


@dataclass(frozen=True)
class TextLayout:
    """Where each sentence of one text goes back: lines of indices into the request's sentence list."""

    lines: list[list[int]]


class TranslationHandler:
    """Text -> sentences -> source ids -> n-best hypotheses -> text joined back."""

    def __init__(self, loaded: LoadedModel, torchscript: bool = True) -> None:
        """torchscript: decode with the model's traced encoder and step graphs (model.jit.trace_translator);
        /attention keeps the eager path, which returns every attention map."""
        assert isinstance(loaded.model, Translator)
        self.name, self.model, self.tokenizer = loaded.name, loaded.model, loaded.tokenizer
        self.decoder: Decodable[Any] = trace_translator(self.model) if torchscript else self.model
        self.cfg = loaded.config
        self.max_len = loaded.config.max_len

    def cost(self, item: Sentence, key: DecodeKey) -> int:
        """Work units of a sentence decoded under `key`."""
        return key.work(item, self.max_len)

    def least_cost(self, key: DecodeKey) -> int:
        """The least a sentence can cost under `key` (one token: its EOS), known before tokenizing."""
        return key.work(Sentence([0]), self.max_len)

    def encode_source(self, text: str, loc: Sequence[str | int]) -> list[int]:
        return checked_source_ids(self.name, self.tokenizer, self.cfg, text, loc)

    def sentences(
        self,
        texts: Sequence[list[list[str]]],
        field: str,
        num_hypotheses: int,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[Sentence], list[TextLayout]]:
        """Every sentence of every text (each split into lines of sentences: app.text.sentences.split_sentences) as
        one item, plus the layouts to put the texts back together; `indices`: the texts' places in the request
        (for error locations), default 0, 1, ..."""
        items: list[Sentence] = []
        layouts = []
        for t, text in zip(indices or range(len(texts)), texts, strict=True):
            loc: tuple[str | int, ...] = (field,) if field == "text" else (field, t)
            lines = []
            for sentences in text:
                lines.append(list(range(len(items), len(items) + len(sentences))))
                items += [Sentence(self.encode_source(s, loc), num_hypotheses) for s in sentences]
            layouts.append(TextLayout(lines))
        return items, layouts

    def run(
        self, items: list[Sentence], key: DecodeKey, should_stop: StopCheck = None
    ) -> list[list[SentenceTranslation]]:
        """Per item its own n-best, detokenized: the batch decodes with the largest n and each item keeps
        its first num_hypotheses (translate_ids sorts by length and pads per chunk). should_stop: checked
        between decoder steps (True raises model.DecodingStopped)."""
        opts = key.options(max(s.num_hypotheses for s in items), self.max_len)
        output = self.decode([s.ids for s in items], opts, key.target_lang, should_stop)
        decode = self.tokenizer.decode
        return [
            [SentenceTranslation(decode(h.tokens), h.score, h.tokens) for h in hyps[: s.num_hypotheses]]
            for hyps, s in zip(output, items, strict=True)
        ]

    def decode(
        self, seqs: list[list[int]], opts: DecodeOptions, target_lang: str, should_stop: StopCheck = None
    ) -> list[list[Hypothesis]]:
        """One dynamic batch of source ids -> n-best hypotheses per item (the engine's part of `run`)."""
        with torch.inference_mode():
            return translate_ids(self.decoder, seqs, opts, target_lang, max(1, len(seqs)), should_stop)

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
                scores += [p.score for p in picks]
            text = "\n".join(lines)
            if all(h.translation != text for h in hyps):
                hyps.append(ScoredTranslation(translation=text, score=sum(scores) / max(1, len(scores))))
        best = hyps[0]
        return TranslationResult(
            translation=best.translation,
            score=best.score if return_scores else None,
            hypotheses=hyps if n > 1 else None,
        )

    def warmup(self) -> None:
        ids = self.encode_source(WARMUP_TEXT, ("text",))
        lang = self.cfg.target_langs[0]
        self.run([Sentence(ids)], DecodeKey(lang, beam_size=2, length_penalty=0.6, max_length=4))

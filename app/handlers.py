"""Per-task serving logic in LitServe's five hooks: decode_request, batch, predict, unbatch, encode_response.

decode_request/encode_response run on the event loop (tokenize and validate one request / shape one
response); `run` = unbatch(predict(batch(items))) runs in the inference thread on one dynamic batch.
Model calls go through model.inference, the code path shared with the evaluate CLI.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from app.errors import invalid
from app.schemas import AttentionResponse, Hypothesis, SentimentResult, TranslationResult
from model import DecodeOptions, LoadedModel, ModelConfig, SentimentClassifier, Tokenizer, Translator
from model.decoding import Hypothesis as Hyp
from model.inference import classify_ids, compile_classifier, translate_ids
from model.preprocess import classifier_ids, source_ids, target_ids

WARMUP_TEXT = "warm up"
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
ClassifierItem = tuple[list[int], str]  # token ids and the text (for an n-gram head)


def _uncut_length(tokenizer: Tokenizer, text: str, ids: list[int], max_len: int, specials: int) -> int | None:
    """The token count of `text` plus its `specials` (EOS, start) when `ids` (built from it) were cut at
    max_len, else None: the text is encoded again only when it may have been cut."""
    if len(ids) == max_len and (n := len(tokenizer.encode(text)) + specials) > max_len:
        return n
    return None


def checked_source_ids(
    name: str, tokenizer: Tokenizer, cfg: ModelConfig, text: str, loc: Sequence[str | int]
) -> list[int]:
    """Translator source ids (pieces + EOS); 422 naming the limit when they do not fit max_len."""
    ids = source_ids(tokenizer, text, cfg)
    if n := _uncut_length(tokenizer, text, ids, cfg.max_len, 1):
        raise invalid(
            loc,
            f"a sentence of {n} tokens exceeds the {cfg.max_len}-token limit of {name} (EOS included): {text[:60]!r}",
        )
    return ids


def split_sentences(text: str) -> list[list[str]]:
    """Lines, each a list of sentences: split on newlines, then after .!?… followed by whitespace."""
    return [[s for s in _SENTENCE_END.split(line.strip()) if s] for line in text.split("\n")]


class SentimentHandler:
    """Text -> [CLS]? ids + EOS -> class probabilities."""

    def __init__(self, loaded: LoadedModel, torchscript: bool = True) -> None:
        assert isinstance(loaded.model, SentimentClassifier)
        self.name, self.model, self.tokenizer = loaded.name, loaded.model, loaded.tokenizer
        self.labels = list(loaded.config.labels)
        # one graph call per batch keeps the GIL free while it runs (see ClassifierGraph): built off the loop
        self._graph = compile_classifier(self.model) if torchscript else None

    def decode_request(self, text: str) -> ClassifierItem:
        ids = classifier_ids(self.tokenizer, text, self.model.cfg)  # truncated to max_len like training
        return ids, text

    def batch(self, items: list[ClassifierItem]) -> list[ClassifierItem]:
        return items  # classify_ids sorts by length and pads to (B, S) tensors per length bucket

    def predict(self, batch: list[ClassifierItem]) -> torch.Tensor:
        ids, texts = [i for i, _ in batch], [t for _, t in batch]  # texts: an n-gram head hashes them here
        return classify_ids(self.model, ids, max(1, len(batch)), self._graph, texts)  # (N, C) float32

    def unbatch(self, output: torch.Tensor) -> list[list[float]]:
        return output.tolist()

    def encode_response(self, probs: list[float]) -> SentimentResult:
        best = max(range(len(probs)), key=probs.__getitem__)
        return SentimentResult.model_construct(  # no validation: every field is built right here
            model=self.name,
            label=self.labels[best],
            score=probs[best],
            probabilities=dict(zip(self.labels, probs, strict=True)),
        )

    def run(self, items: list[ClassifierItem]) -> list[list[float]]:
        with torch.inference_mode():
            return self.unbatch(self.predict(self.batch(items)))

    def warmup(self) -> None:
        self.run([self.decode_request(WARMUP_TEXT)])


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


@dataclass(frozen=True)
class Sentence:
    """One batch item: a sentence's source ids (EOS included) and how many hypotheses its request wants."""

    ids: list[int]
    num_hypotheses: int = 1


@dataclass(frozen=True)
class Decoded:
    """One hypothesis of one sentence."""

    text: str
    score: float
    tokens: list[int]


@dataclass(frozen=True)
class TextLayout:
    """Where each sentence of one text goes back: lines of indices into the request's sentence list."""

    lines: list[list[int]]


class TranslationHandler:
    """Text -> sentences -> source ids -> n-best hypotheses -> text joined back."""

    def __init__(self, loaded: LoadedModel) -> None:
        assert isinstance(loaded.model, Translator)
        self.name, self.model, self.tokenizer = loaded.name, loaded.model, loaded.tokenizer
        self.max_len = loaded.config.max_len

    def encode_source(self, text: str, loc: Sequence[str | int]) -> list[int]:
        return checked_source_ids(self.name, self.tokenizer, self.model.cfg, text, loc)

    def decode_request(
        self, texts: Sequence[str], field: str, num_hypotheses: int
    ) -> tuple[list[Sentence], list[TextLayout]]:
        """Every sentence of every text as one item, plus the layouts to put the texts back together."""
        items: list[Sentence] = []
        layouts = []
        for t, text in enumerate(texts):
            loc: tuple[str | int, ...] = (field,) if field == "text" else (field, t)
            lines = []
            for sentences in split_sentences(text):
                lines.append(list(range(len(items), len(items) + len(sentences))))
                items += [Sentence(self.encode_source(s, loc), num_hypotheses) for s in sentences]
            layouts.append(TextLayout(lines))
        return items, layouts

    def batch(self, items: list[Sentence]) -> list[list[int]]:
        return [s.ids for s in items]  # translate_ids sorts by length and pads per chunk

    def predict(self, batch: list[list[int]], key: DecodeKey, num_hypotheses: int) -> list[list[Hyp]]:
        opts = key.options(num_hypotheses, self.max_len)
        return translate_ids(self.model, batch, opts, key.target_lang, batch_size=max(1, len(batch)))

    def unbatch(self, output: list[list[Hyp]], items: list[Sentence]) -> list[list[Decoded]]:
        """Per item: its own n-best (the batch decoded with the largest n), detokenized."""
        decode = self.tokenizer.decode
        return [
            [Decoded(decode(h.tokens), h.score, h.tokens) for h in hyps[: s.num_hypotheses]]
            for hyps, s in zip(output, items, strict=True)
        ]

    def run(self, items: list[Sentence], key: DecodeKey) -> list[list[Decoded]]:
        with torch.inference_mode():
            n_best = max(s.num_hypotheses for s in items)
            return self.unbatch(self.predict(self.batch(items), key, n_best), items)

    def encode_response(
        self, layout: TextLayout, outputs: list[list[Decoded]], n: int, return_scores: bool
    ) -> TranslationResult:
        """Hypothesis k of a text joins hypothesis k of each sentence (a sentence with fewer repeats its
        last); its score is their mean. Up to n distinct texts: a beam can end with fewer hypotheses than
        asked (e.g. EOS forced at max_length 1), and two token sequences can read alike."""
        available = max((len(outputs[i]) for line in layout.lines for i in line), default=1)
        hyps: list[Hypothesis] = []
        for k in range(min(n, available)):
            lines, scores = [], []
            for line in layout.lines:
                picks = [outputs[i][min(k, len(outputs[i]) - 1)] for i in line]
                lines.append(" ".join(p.text for p in picks))
                scores += [p.score for p in picks]
            text = "\n".join(lines)
            if all(h.translation != text for h in hyps):
                hyps.append(Hypothesis(translation=text, score=sum(scores) / max(1, len(scores))))
        best = hyps[0]
        return TranslationResult(
            translation=best.translation,
            score=best.score if return_scores else None,
            hypotheses=hyps if n > 1 else None,
        )

    def warmup(self) -> None:
        ids = self.encode_source(WARMUP_TEXT, ("text",))
        lang = self.model.cfg.target_langs[0]
        self.run([Sentence(ids)], DecodeKey(lang, beam_size=2, length_penalty=0.6, max_length=4))


@dataclass(frozen=True)
class AttentionItem:
    """Exact model inputs: source ids, and for translators the decoder input (start token included)."""

    source: list[int]
    target: list[int] | None = None


@dataclass(frozen=True)
class AttentionMaps:
    """Per-layer maps of one example, each (H, Q, K) float32 on CPU."""

    encoder: list[torch.Tensor]
    decoder: list[torch.Tensor] | None = None
    cross: list[torch.Tensor] | None = None


@dataclass(frozen=True)
class LayerSelection:
    """The layers of each stack that a request selected (the stacks may differ in depth), and the heads."""

    encoder: list[int]
    decoder: list[int]  # for decoder self- and cross-attention; [] for a classifier
    heads: list[int]


class AttentionHandler:
    """Force-decoding with the explicit attention path (weights returned); one item per forward."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.name, self.model, self.tokenizer = loaded.name, loaded.model, loaded.tokenizer
        cfg = loaded.config
        self.cfg, self.is_translator = cfg, cfg.task == "translation"
        self.encoder_layers = cfg.n_layers
        self.decoder_layers = cfg.n_decoder_layers if self.is_translator else 0

    def select(self, layers: list[int] | None, heads: list[int] | None) -> LayerSelection:
        """Validated layer/head subsets (default all); 422 naming the valid ranges otherwise. A layer index
        selects that layer in each stack that has it (a 4-layer encoder with a 3-layer decoder: layer 3 is
        the encoder's only)."""
        enc, dec, n_heads = self.encoder_layers, self.decoder_layers, self.cfg.n_heads
        for field, values in (("layers", layers), ("heads", heads)):  # each map once: bounded output
            if values and len(set(values)) < len(values):
                twice = next(v for v in values if values.count(v) > 1)
                raise invalid((field,), f"lists {twice} more than once: give each {field[:-1]} at most once")
        if bad := [v for v in layers or [] if v >= max(enc, dec)]:
            stacks = f" (encoder 0..{enc - 1}, decoder 0..{dec - 1})" if dec else ""
            raise invalid(
                ("layers",), f"layer {bad[0]} is out of range: valid range is 0..{max(enc, dec) - 1}{stacks}"
            )
        if bad := [v for v in heads or [] if v >= n_heads]:
            raise invalid(("heads",), f"head {bad[0]} is out of range: valid range is 0..{n_heads - 1}")
        return LayerSelection(
            [v for v in layers or range(enc) if v < enc],
            [v for v in layers or range(dec) if v < dec],
            heads or list(range(n_heads)),
        )

    def decode_request(self, text: str, target_ids: list[int] | None = None) -> AttentionItem:
        if not self.is_translator:
            return AttentionItem(classifier_ids(self.tokenizer, text, self.cfg))
        return AttentionItem(
            checked_source_ids(self.name, self.tokenizer, self.cfg, text, ("text",)), target_ids
        )

    def decoder_input(self, target: str, target_lang: str | None) -> list[int]:
        """Decoder input for a given target: [start] + pieces (the EOS label is not fed); 422 naming the limit
        when it does not fit max_len (as for the source: never cut silently)."""
        cfg = self.cfg
        ids = target_ids(self.tokenizer, target, cfg, target_lang)
        if n := _uncut_length(self.tokenizer, target, ids, cfg.max_len, 2):
            raise invalid(
                ("target",),
                f"a target of {n} tokens exceeds the {cfg.max_len}-token limit of {self.name} "
                "(start and EOS included)",
            )
        return ids[:-1]

    def predict(self, item: AttentionItem) -> AttentionMaps:
        dev = next(self.model.parameters()).device
        src = torch.tensor([item.source], device=dev)
        if isinstance(self.model, SentimentClassifier):
            _, _, weights = self.model.encode(src, need_weights=True)
            return AttentionMaps([w[0].float().cpu() for w in weights])
        assert item.target is not None
        _, maps = self.model.attention(src, torch.tensor([item.target], device=dev))
        return AttentionMaps(
            [w[0] for w in maps.encoder], [w[0] for w in maps.decoder], [w[0] for w in maps.cross]
        )

    def run(self, items: list[AttentionItem]) -> list[AttentionMaps]:
        with torch.inference_mode():
            return [self.predict(item) for item in items]

    def check_size(self, item: AttentionItem, sel: LayerSelection) -> None:
        """422 when the selected maps hold more than MAX_ATTENTION_WEIGHTS numbers (JSON of ~8 bytes each,
        built under the GIL: a bound on memory and on the event loop's stalls)."""
        s, t = len(item.source), len(item.target or [])
        size = len(sel.heads) * (len(sel.encoder) * s * s + len(sel.decoder) * (t * t + t * s))
        if size > MAX_ATTENTION_WEIGHTS:
            raise invalid(
                ("layers",),
                f"the selected maps hold {size:,} attention weights, more than {MAX_ATTENTION_WEIGHTS:,}: "
                f"select fewer layers or heads, or send a shorter text",
                "too_long",
            )

    def encode_response(
        self, item: AttentionItem, maps: AttentionMaps, sel: LayerSelection, translation: str | None
    ) -> AttentionResponse:
        pieces = self.tokenizer.pieces
        decoder = maps.decoder is not None and maps.cross is not None
        return AttentionResponse.model_construct(  # built here, valid: no second pass over every weight
            model=self.name,
            layers=sel.encoder,
            decoder_layers=sel.decoder if decoder else None,
            heads=sel.heads,
            source_tokens=pieces(item.source),
            target_tokens=pieces(item.target) if item.target is not None else None,
            encoder_self_attention=pick(maps.encoder, sel.encoder, sel.heads).tolist(),
            decoder_self_attention=pick(maps.decoder, sel.decoder, sel.heads).tolist() if decoder else None,
            cross_attention=pick(maps.cross, sel.decoder, sel.heads).tolist() if decoder else None,
            translation=translation,
        )

    def encode_json(
        self, item: AttentionItem, maps: AttentionMaps, sel: LayerSelection, translation: str | None
    ) -> bytes:
        """The JSON body (megabytes for a long text: built in a thread, off the event loop)."""
        return self.encode_response(item, maps, sel, translation).model_dump_json(exclude_none=True).encode()


MAX_ATTENTION_WEIGHTS = 2_000_000  # e.g. 4 layers x 8 heads of a 250-token text


def pick(maps: list[torch.Tensor], layers: list[int], heads: list[int]) -> torch.Tensor:
    """Per-layer (H, Q, K) maps -> (L', H', Q, K) for the selected layers and heads, rounded for JSON."""
    if not layers:  # e.g. only encoder layers selected: no decoder map
        return torch.empty(0, len(heads), 0, 0, dtype=torch.float64)
    return torch.stack([maps[layer][heads] for layer in layers]).double().round(decimals=5)

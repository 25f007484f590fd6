"""Batch inference on texts, the one code path shared by the server and the evaluate CLI."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from model.classifier import SentimentClassifier
from model.decoding import DecodeOptions, Hypothesis, decode, pad_ids
from model.preprocess import classifier_ids, source_ids
from model.tokenizer import Tokenizer
from model.translator import Translator


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def length_sorted_chunks(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices sorted by length (longest first) and cut into chunks: little padding per forward pass."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.inference_mode()
def classify_ids(model: SentimentClassifier, seqs: list[list[int]], batch_size: int = 64) -> torch.Tensor:
    """Token id lists -> class probabilities (N, C), float32 on CPU, in input order."""
    out = torch.empty(len(seqs), len(model.cfg.labels))
    for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
        out[chunk] = model.predict(pad_ids([seqs[i] for i in chunk], model.cfg.pad_id, _device(model))).cpu()
    return out


def classify_texts(
    model: SentimentClassifier, tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 64
) -> torch.Tensor:
    return classify_ids(model, [classifier_ids(tokenizer, t, model.cfg) for t in texts], batch_size)


@torch.inference_mode()
def translate_ids(
    model: Translator,
    seqs: list[list[int]],
    options: DecodeOptions,
    target_lang: str | None = None,
    batch_size: int = 64,
) -> list[list[Hypothesis]]:
    """Source id lists (each ending in EOS) -> n-best hypotheses per source, in input order."""
    results: list[list[Hypothesis]] = [[] for _ in seqs]
    dev = _device(model)
    start = model.cfg.start_id(target_lang)
    for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
        src = pad_ids([seqs[i] for i in chunk], model.cfg.pad_id, dev)
        starts = torch.full((len(chunk),), start, dtype=torch.long, device=dev)
        for i, hyps in zip(chunk, decode(model, src, options, starts), strict=True):
            results[i] = hyps
    return results


def translate_texts(
    model: Translator,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    options: DecodeOptions,
    target_lang: str | None = None,
    batch_size: int = 64,
) -> list[list[tuple[str, float]]]:
    """Texts -> per text, (translation, score) hypotheses best first."""
    hyps = translate_ids(
        model, [source_ids(tokenizer, t, model.cfg) for t in texts], options, target_lang, batch_size
    )
    return [[(tokenizer.decode(h.tokens), h.score) for h in hs] for hs in hyps]

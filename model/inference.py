"""Batch inference on texts, the one code path shared by the server and the evaluate CLI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from model.alignment import align, eager
from model.classifier import SentimentClassifier, calibrated
from model.decoding import Decodable, DecodeOptions, Hypothesis, StopCheck, decode
from model.ngram import CHUNK, text_units
from model.ngram_text import NgramText
from model.preprocess import classifier_ids, pad_ids, source_ids
from model.tokenizer import Tokenizer
from model.unknowns import ITEMS_OUT, encode_source, restore_text


def _device(model: Any) -> torch.device:
    """Where a module's parameters live (a wrapper module, such as a TracedTranslator: its model's)."""
    return next(model.parameters()).device


def length_sorted_chunks(lengths: Sequence[int], batch_size: int, forward_cost: int = 0) -> list[list[int]]:
    """Indices sorted by length (longest first) and cut into chunks of at most batch_size.

    forward_cost=0: equal cuts. Otherwise the cuts minimise sum(forward_cost + size * longest) over chunks,
    exactly, by dynamic programming: a batch of 32 mixed lengths runs as a few length buckets when the padding
    saved outweighs the extra passes. Over every position that is O(n * batch_size) steps; over the positions
    where the length changes (R of them) O(R^2): the cheaper of the two runs. A CPU's batch of 32 takes the
    first; a GPU's batch of 512 holds a few dozen distinct lengths and takes the second."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    n = len(order)
    if forward_cost <= 0:
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    sl = [lengths[i] for i in order]
    anchors = anchors_of(sl)
    if 4 * len(anchors) ** 2 < n * min(n, batch_size):  # an anchor pair costs about 4 positional steps
        sizes = anchored_sizes(sl, anchors, batch_size, forward_cost)
    else:
        sizes = positional_sizes(sl, batch_size, forward_cost)
    chunks, i = [], 0
    for size in sizes:
        chunks.append(order[i : i + size])
        i += size
    return chunks


def anchors_of(sl: Sequence[int]) -> list[int]:
    """0, each position where the sorted lengths `sl` change, and len(sl) ([0] when empty)."""
    n = len(sl)
    return [0, *(p for p in range(1, n) if sl[p] != sl[p - 1]), n] if n else [0]


def positional_sizes(sl: Sequence[int], batch_size: int, forward_cost: int) -> list[int]:
    """The optimal chunk sizes of lengths `sl` (sorted, longest first), a cut considered at every position:
    best[i], the cost of items i.., tries every end of the chunk that starts at i."""
    n = len(sl)
    best, cut = [0] * (n + 1), [n] * (n + 1)  # best[i]: cost of items i.., first chunk ends at cut[i]
    for i in range(n - 1, -1, -1):
        best[i] = forward_cost + sl[i] + best[i + 1]
        cut[i] = i + 1
        for j in range(i + 2, min(n, i + batch_size) + 1):
            cost = forward_cost + (j - i) * sl[i] + best[j]  # sl[i] is the chunk's longest
            if cost < best[i]:
                best[i], cut[i] = cost, j
    sizes, i = [], 0
    while i < n:
        sizes.append(cut[i] - i)
        i = cut[i]
    return sizes


def anchored_sizes(
    sl: Sequence[int], anchors: Sequence[int], batch_size: int, forward_cost: int
) -> list[int]:
    """The same optimum, searched over the anchors (0, n and each position where the length changes) alone.

    Why that suffices: take a cut inside a run of equal lengths, with a chunk after it that is not full.
    Moving the last item before the cut into that chunk changes the cost by (the run's length - the longest
    of the chunk before) <= 0. So some optimum has, between two anchors a < b that are cuts, one chunk
    [a, b - (m-1) * batch_size) and then m-1 full chunks, m = ceil((b - a) / batch_size); a full chunk that
    starts at p costs forward_cost + batch_size * sl[p], summed in O(1) from strided prefix sums."""
    n, bs = len(sl), batch_size
    strided = [0] * n  # strided[p] = sl[p] + sl[p - bs] + sl[p - 2 bs] + ...
    for p in range(n):
        strided[p] = sl[p] + (strided[p - bs] if p >= bs else 0)

    def full_chunks(b: int, m: int) -> int:  # sum of sl[b - k * bs] for k = 1 .. m-1
        hi, lo = b - bs, b - m * bs
        return (strided[hi] if hi >= 0 else 0) - (strided[lo] if lo >= 0 else 0)

    best = {n: 0}
    step: dict[int, tuple[int, int]] = {}  # anchor -> (next anchor cut, chunks between)
    for k in range(len(anchors) - 2, -1, -1):
        a = anchors[k]
        for b in anchors[k + 1 :]:
            m = -(-(b - a) // bs)
            cost = m * forward_cost + (b - a - (m - 1) * bs) * sl[a] + bs * full_chunks(b, m) + best[b]
            if a not in best or cost < best[a]:
                best[a], step[a] = cost, (b, m)
    sizes, a = [], 0
    while a < n:
        b, m = step[a]
        sizes += [b - a - (m - 1) * bs] + [bs] * (m - 1)
        a = b
    return sizes


# A classifier forward pass costs about this many padded tokens on top of its tokens: its fixed per-call
# dispatch in units of the per-token cost (`python -m bench.forward_cost`; BENCHMARKS.md)
FORWARD_COST_TOKENS = 64
# The same on a GPU, where a forward's fixed cost is its kernel launches (about a hundred, launch-bound on an
# H200: BENCHMARKS.md, "The GPU box") and a token costs a fraction of a microsecond: estimated, to be measured
# with `python -m bench.forward_cost --device cuda`. With the CPU's 64, a CUDA batch of 256 short texts ran as
# 5 forwards; with this, as one
GPU_FORWARD_COST_TOKENS = 2048


def forward_cost_tokens(device: torch.device) -> int:
    """length_sorted_chunks' forward_cost for a classifier on `device`."""
    return FORWARD_COST_TOKENS if device.type == "cpu" else GPU_FORWARD_COST_TOKENS


class ClassifierGraph(nn.Module):
    """One batch of a classifier as one module: the texts' n-grams hashed at once (with an n-gram head), then
    the model's logits on each length bucket -> logits (N, C) float32 on CPU, in input order.

    Scripted (model.jit.compile_classifier), a whole batch runs in C++ and releases the GIL once. Called op by op from
    Python, every op releases the GIL and waits to get it back while another thread (the server's event
    loop) runs Python. Unscripted, the same code runs eagerly: the reference the compiled graph is checked
    against.
    """

    __constants__ = ["has_ngram"]  # TorchScript compiles only the branch taken

    def __init__(self, model: SentimentClassifier, logits: nn.Module | None = None) -> None:
        """logits: (ids (B, S)[, ngrams]) -> logits (B, C), e.g. a trace of model.logits (default: the model)."""
        super().__init__()
        self.logits = logits if logits is not None else model
        self.classes = len(model.cfg.labels)
        self.has_ngram = model.ngram is not None
        if model.ngram is not None:
            self.ngram = model.ngram  # for its hashing; its logits are part of model.logits

    def forward(
        self, chunks: list[torch.Tensor], rows: list[torch.Tensor], units: list[torch.Tensor]
    ) -> torch.Tensor:
        """chunks: padded ids (b, S) per length bucket; rows: each bucket's row indices (b,) in the output;
        units: text_units of the texts in bucket order (needed with an n-gram head)."""
        n = 0
        for r in rows:
            n += r.numel()
        out = torch.empty(n, self.classes, device=rows[0].device)
        if self.has_ngram:
            # all texts hashed in one call (a call per bucket would repeat the hashing's many small ops), then
            # each bucket's texts, contiguous in bucket order, take their slice of the n-gram ids
            ids, lengths = self.ngram.hash(units)
            offsets = torch.cumsum(lengths, 0) - lengths  # (N,) where each text's n-grams start
            end = 0
            for i in range(len(rows)):  # (TorchScript has no zip(strict=True))
                start, end = end, end + rows[i].numel()
                lo, hi = int(offsets[start]), int(offsets[end]) if end < n else ids.numel()
                ngrams = (ids[lo:hi], offsets[start:end] - lo)
                out.index_copy_(0, rows[i], self.logits(chunks[i], ngrams))
        else:
            for i in range(len(rows)):
                out.index_copy_(0, rows[i], self.logits(chunks[i]))
        return out.cpu()


@torch.inference_mode()
def classifier_logits(
    model: SentimentClassifier,
    seqs: list[list[int]],
    batch_size: int = 64,
    graph: ClassifierGraph | None = None,
    texts: Sequence[str | NgramText] | None = None,
) -> torch.Tensor:
    """Token id lists -> logits (N, C), float32 on CPU, in input order: as the model computes them, before
    its temperature (classify_ids applies it).

    `graph`: the model's ClassifierGraph (e.g. model.jit.compile_classifier(model); default: the eager
    one). A model with an n-gram head also needs the `texts` the ids came from (the head hashes the whole
    text), each a string or its model.ngram_text.ngram_text (a server's, made where it tokenizes). CHUNK
    texts at a time (bounded memory on whole test sets), each one graph call.
    """
    if model.ngram is not None and (texts is None or len(texts) != len(seqs)):
        raise ValueError(f"a classifier with a {model.cfg.ngram} n-gram head needs the text of every id list")
    graph = graph if graph is not None else ClassifierGraph(model)
    dev = _device(model)  # once: a parameter walk under the GIL
    parts = []
    for start in range(0, len(seqs), CHUNK):
        group = seqs[start : start + CHUNK]
        chunks = length_sorted_chunks([len(s) for s in group], batch_size, forward_cost_tokens(dev))
        units = []
        if texts is not None and graph.has_ngram:
            units = text_units([texts[start + i] for c in chunks for i in c], dev)  # in bucket order
        parts.append(
            graph(
                [pad_ids([group[i] for i in c], model.cfg.pad_id, dev) for c in chunks],
                [torch.tensor(c, device=dev) for c in chunks],
                units,
            )
        )
    if not parts:
        return torch.empty(0, len(model.cfg.labels))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


@torch.inference_mode()
def classify_ids(
    model: SentimentClassifier,
    seqs: list[list[int]],
    batch_size: int = 64,
    graph: ClassifierGraph | None = None,  # as served: model.jit.compile_classifier(model); None: eager
    texts: Sequence[str | NgramText] | None = None,
) -> torch.Tensor:
    """Token id lists -> class probabilities (N, C), float32 on CPU, in input order (see classifier_logits):
    the logits divided by the model's calibrated temperature, then softmax."""
    return calibrated(classifier_logits(model, seqs, batch_size, graph, texts), model.cfg.temperature)


def classify_texts(
    model: SentimentClassifier, tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 64
) -> torch.Tensor:
    ids = [classifier_ids(tokenizer, t, model.cfg) for t in texts]
    return classify_ids(model, ids, batch_size, texts=texts)


@torch.inference_mode()
def translate_ids(
    model: Decodable[Any],
    seqs: list[list[int]],
    options: DecodeOptions | Sequence[DecodeOptions],
    target_lang: str | None = None,
    batch_size: int = 64,
    should_stop: StopCheck = None,
) -> list[list[Hypothesis]]:
    """Source id lists (each ending in EOS) -> n-best hypotheses per source, in input order. options: one
    for all, or one per source (sharing a beam size: model.decoding.per_row).

    A model that takes its target-language tag on the source side gets it in front of each source here.
    should_stop: called before each decoder step; True raises model.decoding.DecodingStopped."""
    results: list[list[Hypothesis]] = [[] for _ in seqs]
    dev = _device(model)
    start = model.cfg.start_id(target_lang)
    if prefix := model.cfg.source_prefix(target_lang):
        seqs = [prefix + s for s in seqs]
    for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
        src = pad_ids([seqs[i] for i in chunk], model.cfg.pad_id, dev)
        starts = torch.full((len(chunk),), start, dtype=torch.long, device=dev)
        opts = options if isinstance(options, DecodeOptions) else [options[i] for i in chunk]
        for i, hyps in zip(chunk, decode(model, src, opts, starts, should_stop), strict=True):
            results[i] = hyps
    return results


def translate_texts(
    model: Decodable[Any],
    tokenizer: Tokenizer,
    texts: Sequence[str],
    options: DecodeOptions,
    target_lang: str | None = None,
    batch_size: int = 64,
    replace_unknowns: bool = False,
    items: str = ITEMS_OUT,
) -> list[list[tuple[str, float]]]:
    """Texts -> per text, (translation, score) hypotheses best first; replace_unknowns: output <unk>s become
    the source text they attend to and protected items are taken out and put back (model/unknowns.py), as the
    server does by default (`items`: how protected items are encoded, model.unknowns.encode_source)."""
    if not replace_unknowns:
        hyps = translate_ids(
            model, [source_ids(tokenizer, t, model.cfg) for t in texts], options, target_lang, batch_size
        )
        return [[(tokenizer.decode(h.tokens), h.score) for h in hs] for hs in hyps]
    sources = [encode_source(tokenizer, t, model.cfg, items=items) for t in texts]
    seqs = [s.ids for s in sources]
    hyps = translate_ids(model, seqs, options, target_lang, batch_size)
    cfg = model.cfg
    align(eager(model), seqs, hyps, cfg.start_id(target_lang), [s.align for s in sources], batch_size,
          cfg.source_prefix(target_lang))  # fmt: skip
    return [
        [(restore_text(tokenizer, h, s), h.score) for h in hs] for hs, s in zip(hyps, sources, strict=True)
    ]

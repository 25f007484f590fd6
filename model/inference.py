"""Batch inference on texts, the one code path shared by the server and the evaluate CLI."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from model.classifier import SentimentClassifier
from model.decoding import DecodeOptions, Hypothesis, StopCheck, decode
from model.jit import WARNINGS_LOCK
from model.ngram import CHUNK, NgramSpec, bags, text_units
from model.preprocess import classifier_ids, pad_ids, source_ids
from model.tokenizer import Tokenizer
from model.translator import Translator


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


# A classifier forward pass costs about this many padded tokens on top of its tokens (measured on the
# shipped d=128..256 encoders on CPU: ~0.5 ms of dispatch against ~7 us per token)
FORWARD_COST_TOKENS = 64


def length_sorted_chunks(lengths: Sequence[int], batch_size: int, forward_cost: int = 0) -> list[list[int]]:
    """Indices sorted by length (longest first) and cut into chunks of at most batch_size.

    forward_cost=0: equal cuts. Otherwise the cuts minimise sum(forward_cost + size * longest) over chunks
    (dynamic programming): a batch of 32 mixed lengths runs as a few length buckets when the padding
    saved outweighs the extra passes.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if forward_cost <= 0:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    n, sl = len(order), [lengths[i] for i in order]
    best, cut = [0] * (n + 1), [n] * (n + 1)  # best[i]: cost of items i.., first chunk ends at cut[i]
    for i in range(n - 1, -1, -1):
        best[i] = forward_cost + sl[i] + best[i + 1]
        cut[i] = i + 1
        for j in range(i + 2, min(n, i + batch_size) + 1):
            cost = forward_cost + (j - i) * sl[i] + best[j]  # sl[i] is the chunk's longest
            if cost < best[i]:
                best[i], cut[i] = cost, j
    chunks, i = [], 0
    while i < n:
        chunks.append(order[i : cut[i]])
        i = cut[i]
    return chunks


class ClassifierGraph(nn.Module):
    """One batch of a classifier as one module: the texts' n-grams hashed at once (with an n-gram head), then
    the model's logits on each length bucket -> logits (N, C) float32 on CPU, in input order.

    Scripted (compile_classifier), a whole batch runs in C++ and releases the GIL once. Called op by op from
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
            # all texts hashed in one call (a call per bucket costs ~100 more small ops each), then each
            # bucket's texts, contiguous in bucket order, take their slice of the n-gram ids
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


def compile_classifier(model: SentimentClassifier) -> ClassifierGraph:
    """ClassifierGraph scripted around a trace of model.logits (same outputs, any batch size and length;
    checked against the eager graph here).

    Why the trace: an eager forward releases and re-takes the GIL around each of its ~100 ops, and every re-take
    waits while another Python thread runs (the server's event loop): see README, "The classifier graph". The
    trace records no data-dependent branch: the only one, the max_len check, holds for every input (inputs are
    truncated to max_len before they get here). The n-gram hashing, whose shapes depend on the texts, is a
    scripted function.
    """
    model.eval()
    dev = _device(model)
    example = torch.full((2, 8), model.cfg.unk_id, dtype=torch.long, device=dev)
    example[1, 4:] = model.cfg.pad_id
    inputs: tuple = (example,)
    if model.ngram is not None:
        inputs = (example, bags(["a b", "c"], NgramSpec.parse(model.cfg.ngram), model.cfg.ngram_buckets, dev))
    # one compile at a time: warnings.catch_warnings() swaps process-wide filters, and torch.jit.script's
    # type cache is shared (a server loads its models on several threads)
    with WARNINGS_LOCK, warnings.catch_warnings(), torch.no_grad():
        # expected: the deprecation notices and the max_len check's TracerWarning (see above); any other
        # TracerWarning (a new data-dependent branch) is raised, and the trace must match the eager model
        warnings.filterwarnings("error", category=torch.jit.TracerWarning)  # the later filters come first
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.(trace|script).* is deprecated")
        warnings.filterwarnings("ignore", message="Converting a tensor to a Python boolean")
        traced = torch.jit.trace(model, inputs, check_trace=False)
        graph: ClassifierGraph = torch.jit.script(ClassifierGraph(model, traced))  # type: ignore[assignment]
    rng = torch.Generator().manual_seed(0)
    atol = 1e-4 if next(model.parameters()).dtype == torch.float32 else 2e-2
    eager = ClassifierGraph(model)
    texts = ["a b", "warm up", "x"]
    for shape in ((1, 1), (3, min(model.cfg.max_len, 21))):  # other shapes than the example's
        ids = torch.randint(5, model.cfg.vocab_size, shape, generator=rng)
        ids[-1, max(1, shape[1] // 2) :] = model.cfg.pad_id
        seqs = [[i for i in row if i != model.cfg.pad_id] for row in ids.tolist()]
        want = classify_ids(model, seqs, 2, eager, texts[: len(seqs)])
        got = classify_ids(model, seqs, 2, graph, texts[: len(seqs)])
        if not torch.allclose(got, want, rtol=0, atol=atol):
            raise RuntimeError(
                f"compiled classifier differs from eager by {(got - want).abs().max().item():.2g}"
            )
    return graph


@torch.inference_mode()
def classifier_logits(
    model: SentimentClassifier,
    seqs: list[list[int]],
    batch_size: int = 64,
    graph: ClassifierGraph | None = None,
    texts: Sequence[str] | None = None,
) -> torch.Tensor:
    """Token id lists -> logits (N, C), float32 on CPU, in input order.

    `graph`: the model's ClassifierGraph (e.g. compile_classifier(model); default: the eager one). A model
    with an n-gram head also needs the `texts` the ids came from (the head hashes the whole text). CHUNK texts
    at a time (bounded memory on whole test sets), each one graph call.
    """
    if model.ngram is not None and (texts is None or len(texts) != len(seqs)):
        raise ValueError(f"a classifier with a {model.cfg.ngram} n-gram head needs the text of every id list")
    graph = graph if graph is not None else ClassifierGraph(model)
    dev = _device(model)  # once: a parameter walk under the GIL
    parts = []
    for start in range(0, len(seqs), CHUNK):
        group = seqs[start : start + CHUNK]
        chunks = length_sorted_chunks([len(s) for s in group], batch_size, FORWARD_COST_TOKENS)
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
    graph: ClassifierGraph | None = None,
    texts: Sequence[str] | None = None,
) -> torch.Tensor:
    """Token id lists -> class probabilities (N, C), float32 on CPU, in input order (see classifier_logits)."""
    return classifier_logits(model, seqs, batch_size, graph, texts).softmax(-1)


def classify_texts(
    model: SentimentClassifier, tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 64
) -> torch.Tensor:
    ids = [classifier_ids(tokenizer, t, model.cfg) for t in texts]
    return classify_ids(model, ids, batch_size, texts=texts)


@torch.inference_mode()
def translate_ids(
    model: Translator,
    seqs: list[list[int]],
    options: DecodeOptions | Sequence[DecodeOptions],
    target_lang: str | None = None,
    batch_size: int = 64,
    should_stop: StopCheck = None,
) -> list[list[Hypothesis]]:
    """Source id lists (each ending in EOS) -> n-best hypotheses per source, in input order. options: one
    for all, or one per source (sharing a beam size: model.decoding.per_row).

    should_stop: called before each decoder step; True raises model.decoding.DecodingStopped."""
    results: list[list[Hypothesis]] = [[] for _ in seqs]
    dev = _device(model)
    start = model.cfg.start_id(target_lang)
    for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
        src = pad_ids([seqs[i] for i in chunk], model.cfg.pad_id, dev)
        starts = torch.full((len(chunk),), start, dtype=torch.long, device=dev)
        opts = options if isinstance(options, DecodeOptions) else [options[i] for i in chunk]
        for i, hyps in zip(chunk, decode(model, src, opts, starts, should_stop), strict=True):
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

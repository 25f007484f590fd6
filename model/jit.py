"""Every compiled graph of the library, built at the call site (gpt-fast style: the models stay eager).

- `compile_classifier(model)`: a classifier batch (n-gram hashing, then logits per length bucket) as one
  scripted ClassifierGraph around a trace of model.logits.
- `trace_translator(model)`: a TracedTranslator, the translator's encode, cross-attention K/V and decoder
  step as traced graphs; it decodes (model.decoding) as the Translator does.

Why TorchScript: a graph runs its ops in C++, without per-op Python dispatch, and releases the GIL once per
call; an eager forward releases and re-takes the GIL around each op, and every re-take waits while another
Python thread (the server's event loop) runs. Each graph is traced from the eager code on shapes other than
the ones it serves, and tests pin it to the eager path.

torch.jit.trace is deprecated upstream and warns; its TracerWarnings flag Python-side decisions that a graph
bakes in. `tracing()` silences the deprecation notice and the warnings a caller names as checked, turns any
other TracerWarning into an error, and lets one trace run at a time: warnings.catch_warnings() swaps
process-wide filters, and torch.jit's type cache is shared (a server loads its models on several threads).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from model.classifier import SentimentClassifier
from model.config import ModelConfig
from model.inference import ClassifierGraph, classify_ids
from model.layers import LayerCache
from model.ngram import NgramSpec, bags
from model.translator import DecoderState, Translator, advance, step_inputs

WARNINGS_LOCK = threading.Lock()  # held by whoever swaps the process-wide warning filters
# the one Python-side check both encoders make, Embeddings' max_len: it holds for every input, since
# sources are cut to max_len before they get here
MAX_LEN_CHECK = "Converting a tensor to a Python boolean"


@contextmanager
def tracing(*expected: str) -> Iterator[None]:
    """Context for torch.jit.trace/script calls; `expected`: regexes of TracerWarnings known to be harmless."""
    with WARNINGS_LOCK, warnings.catch_warnings(), torch.inference_mode():
        warnings.filterwarnings("error", category=torch.jit.TracerWarning)  # later filters take precedence
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.(trace|script).* is deprecated")
        for message in expected:
            warnings.filterwarnings("ignore", message=message)
        yield


# --- classifier --------------------------------------------------------------------------------------------


def compile_classifier(model: SentimentClassifier) -> ClassifierGraph:
    """ClassifierGraph scripted around a trace of model.logits (same outputs, any batch size and length;
    checked against the eager graph here). The n-gram hashing, whose shapes depend on the texts, is a
    scripted function (model.ngram)."""
    model.eval()
    dev = next(model.parameters()).device
    example = torch.full((2, 8), model.cfg.unk_id, dtype=torch.long, device=dev)
    example[1, 4:] = model.cfg.pad_id
    inputs: tuple = (example,)
    if model.ngram is not None:
        inputs = (example, bags(["a b", "c"], NgramSpec.parse(model.cfg.ngram), model.cfg.ngram_buckets, dev))
    with tracing(MAX_LEN_CHECK):
        traced = torch.jit.trace(model, inputs, check_trace=False)
        graph: ClassifierGraph = torch.jit.script(ClassifierGraph(model, traced))  # type: ignore[assignment]
    _check_classifier(model, graph)
    return graph


def _check_classifier(model: SentimentClassifier, graph: ClassifierGraph) -> None:
    """Raise when `graph` differs from the eager ClassifierGraph on shapes other than the trace's example."""
    rng = torch.Generator().manual_seed(0)
    atol = 1e-4 if next(model.parameters()).dtype == torch.float32 else 2e-2
    eager = ClassifierGraph(model)
    texts = ["a b", "warm up", "x"]
    for shape in ((1, 1), (3, min(model.cfg.max_len, 21))):
        ids = torch.randint(5, model.cfg.vocab_size, shape, generator=rng)
        ids[-1, max(1, shape[1] // 2) :] = model.cfg.pad_id
        seqs = [[i for i in row if i != model.cfg.pad_id] for row in ids.tolist()]
        want = classify_ids(model, seqs, 2, eager, texts[: len(seqs)])
        got = classify_ids(model, seqs, 2, graph, texts[: len(seqs)])
        if not torch.allclose(got, want, rtol=0, atol=atol):
            raise RuntimeError(
                f"compiled classifier differs from eager by {(got - want).abs().max().item():.2g}"
            )


# --- translator --------------------------------------------------------------------------------------------


class _Encode(nn.Module):
    def __init__(self, model: Translator) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        memory, mask, _ = self.model.encode(src)
        return memory, mask


class _Cross(nn.Module):
    def __init__(self, model: Translator) -> None:
        super().__init__()
        self.model = model

    def forward(self, memory: Tensor) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        caches = self.model.decoder.init_cache(memory)
        return tuple(c.cross_k for c in caches), tuple(c.cross_v for c in caches)


class _Step(nn.Module):
    def __init__(self, model: Translator) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Any) -> tuple[Tensor, tuple[Tensor, ...], tuple[Tensor, ...]]:
        return self.model.step(*inputs)


@dataclass
class TracedGraphs:
    """A Translator's encode (src -> memory, mask), cross-attention K/V (memory -> per-layer K, V) and step
    (Translator.step's signature), as TorchScript."""

    encode: torch.jit.ScriptModule
    cross: torch.jit.ScriptModule
    step: torch.jit.ScriptModule


class TracedTranslator(nn.Module):
    """A Translator decoding through its TracedGraphs: a model.decoding.Decodable, like the Translator it
    wraps (`model`: its weights, config and eager paths such as attention maps)."""

    def __init__(self, model: Translator, graphs: TracedGraphs) -> None:
        super().__init__()
        self.model = model
        self.graphs = graphs  # a plain attribute, not submodules: the graphs hold the model's tensors

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
        """src (B, S) -> memory (B, S, D), memory mask (B, 1, 1, S), no attention maps."""
        memory, mask = self.graphs.encode(src)
        return memory, mask, []

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> DecoderState:
        """Cross-attention K/V from memory (N, S, D), once; empty self-attention caches."""
        cross_k, cross_v = self.graphs.cross(memory)
        empty = memory.new_zeros(memory.size(0), self.cfg.n_heads, 0, self.cfg.head_dim)
        caches = [LayerCache(empty, empty, k, v) for k, v in zip(cross_k, cross_v, strict=True)]
        return DecoderState(caches, memory_mask)

    def decode_step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Last tokens (R,) -> log-probabilities (R, V) in float32 and the advanced state."""
        return advance(self.graphs.step, tokens, state)


def trace_translator(model: Translator) -> TracedTranslator:
    """Trace `model` (put in eval mode) on shapes that differ in every dimension (N=2 examples of G=3
    hypotheses, 5 source and 2 cached positions), so the graphs take any batch, beam and length. Trace after
    the last change of device, dtype or weights (e.g. quantization): the graphs hold the model's tensors."""
    model.eval()
    dev, pad = model.banned.device, model.cfg.pad_id
    src = torch.full((2, 5), model.cfg.eos_id, dtype=torch.long, device=dev)
    src[1, 3:] = pad  # one padded row, so the mask is a real input
    with tracing(MAX_LEN_CHECK):
        encode = torch.jit.trace(_Encode(model), (src,), check_trace=False)
        memory, mask = encode(src)
        cross = torch.jit.trace(_Cross(model), (memory,), check_trace=False)
        state = model.init_state(memory, mask).select(torch.tensor([0, 0, 0, 1, 1, 1], device=dev))
        tokens = torch.full((6,), model.cfg.eos_id, dtype=torch.long, device=dev)
        for _ in range(2):
            _, state = model.decode_step(tokens, state)
        step = torch.jit.trace(_Step(model), step_inputs(tokens, state), check_trace=False)
    return TracedTranslator(model, TracedGraphs(encode, cross, step))

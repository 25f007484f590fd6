"""Batched greedy and beam search over a KV-cached decoder: any `Decodable` (a Translator, its traced
model.jit.TracedTranslator, an engine or an imported model that has its three methods).

Greedy is beam search with beam_size=1 (CTranslate2's convention); `greedy_decode` is a dedicated, cheaper
loop that `decode` takes for beam_size 1 (a parity test pins it to beam search with K=1). Both force EOS at each example's length limit.
Both take an optional `should_stop()`, called before each decoder step: when it returns True they raise
DecodingStopped (a server stops a batch whose requests have all left). Options may differ per example
(`decode(..., [opts per row])`) in what changes no tensor shape: the length penalty (it ranks finished
hypotheses only), the length limit and the n-best count; the beam size is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, Self, TypeVar

import torch
from torch import Tensor

from model.config import ModelConfig
from model.options import DecodeOptions, DecodingStopped, Hypothesis


class Reorderable(Protocol):
    """A decoder's cache over R hypothesis rows of N examples (e.g. model.translator.DecoderState)."""

    def select(self, rows: Tensor, examples: Tensor | None = None) -> Self:
        """Keep/reorder rows (R',) by beam origin; `examples` (N',) when the set of examples changes."""
        ...


S = TypeVar("S", bound=Reorderable)


class Decodable(Protocol[S]):
    """What greedy and beam search decode with."""

    @property
    def cfg(self) -> ModelConfig:  # bos_id, eos_id, max_len
        ...

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor, Any]:
        """src (B, S) -> memory (B, S, D), memory mask (B, 1, 1, S), anything (e.g. attention maps)."""
        ...

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> S:
        """The state before the first step (e.g. cross-attention K/V computed once)."""
        ...

    def decode_step(self, tokens: Tensor, state: S) -> tuple[Tensor, S]:
        """Last tokens (R,) -> log-probabilities (R, V) and the state one position further."""
        ...


StopCheck = Callable[[], bool] | None  # called between decoder steps; True stops decoding
Options = DecodeOptions | Sequence[DecodeOptions]  # one for every example, or one per example


def per_row(options: Options | None, n: int, default: DecodeOptions) -> list[DecodeOptions]:
    """One DecodeOptions per example; ValueError unless they share one beam size."""
    if options is None or isinstance(options, DecodeOptions):
        return [options or default] * n
    rows = list(options)
    if len(rows) != n:
        raise ValueError(f"{len(rows)} DecodeOptions for {n} examples")
    if len({o.beam_size for o in rows}) > 1:
        raise ValueError(f"one beam_size per batch, got {sorted({o.beam_size for o in rows})}")
    return rows


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al., 2016)."""
    return ((5.0 + length) / 6.0) ** alpha


def _start(model: Decodable[S], src: Tensor, start_ids: Tensor | None) -> tuple[S, Tensor, list[int]]:
    memory, mask, _ = model.encode(src)
    if start_ids is None:
        start_ids = torch.full((src.size(0),), model.cfg.bos_id, dtype=torch.long, device=src.device)
    lengths = mask[:, 0, 0, :].sum(-1).tolist()
    return model.init_state(memory, mask), start_ids, lengths


def _force_eos(log_probs: Tensor, rows: Tensor, eos_id: int) -> Tensor:
    """At the length limit only EOS may follow: (N, V) -> (N, V) with the other entries of `rows` at -inf."""
    if rows.any():
        forced = torch.full_like(log_probs, float("-inf"))
        forced[:, eos_id] = log_probs[:, eos_id]
        log_probs = torch.where(rows[:, None], forced, log_probs)
    return log_probs


@torch.inference_mode()
def greedy_decode(
    model: Decodable[Any],
    src: Tensor,
    options: Options | None = None,  # None: DecodeOptions(beam_size=1); beam_size is not read
    start_ids: Tensor | None = None,
    should_stop: StopCheck = None,
) -> list[list[Hypothesis]]:
    """src (B, S) padded ids -> one hypothesis per example; finished rows leave the batch."""
    rows = per_row(options, src.size(0), DecodeOptions(beam_size=1))
    eos = model.cfg.eos_id
    state, tokens, src_lens = _start(model, src, start_ids)
    limits = torch.tensor(
        [min(o.limit(n), model.cfg.max_len) for o, n in zip(rows, src_lens, strict=True)], device=src.device
    )
    active = torch.arange(src.size(0), device=src.device)  # example index of each row
    out: list[list[int]] = [[] for _ in src_lens]
    log_prob = [0.0] * len(src_lens)
    results: list[list[Hypothesis]] = [[] for _ in src_lens]
    for t in range(int(limits.max())):
        if should_stop is not None and should_stop():
            raise DecodingStopped(t)
        log_probs, state = model.decode_step(tokens, state)
        log_probs = _force_eos(log_probs, limits[active] == t + 1, eos)
        best, tokens = log_probs.max(-1)
        keep = []
        for row, (ex, tok, lp) in enumerate(
            zip(active.tolist(), tokens.tolist(), best.tolist(), strict=True)
        ):
            log_prob[ex] += lp
            if tok == eos:
                results[ex] = [
                    Hypothesis(
                        out[ex], log_prob[ex] / length_penalty(t + 1, rows[ex].length_penalty), log_prob[ex]
                    )
                ]
            else:
                out[ex].append(tok)
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(active):
            index = torch.tensor(keep, device=src.device)
            state, tokens, active = state.select(index, index), tokens[index], active[index]
    return results


@torch.inference_mode()
def beam_search(
    model: Decodable[Any],
    src: Tensor,
    options: Options | None = None,  # None: DecodeOptions(), its default beam; or one per example
    start_ids: Tensor | None = None,
    should_stop: StopCheck = None,
) -> list[list[Hypothesis]]:
    """src (B, S) padded ids -> per example, its `num_hypotheses` hypotheses sorted best first.

    Each step expands the K alive beams of every unfinished example, keeps the best 2K candidates, finalizes
    those ending in EOS among the top K, and continues with the best K others. An example is done when it has
    K finished hypotheses or reaches its length limit (where EOS is forced). The KV cache is reordered by beam
    origin, and finished examples are dropped from the batch.
    """
    n = src.size(0)
    opts = per_row(options, n, DecodeOptions())
    k, eos, alphas = opts[0].beam_size, model.cfg.eos_id, [o.length_penalty for o in opts]
    dev = src.device
    state, start, src_lens = _start(model, src, start_ids)
    # positions must fit the encoding
    limits = [min(o.limit(s), model.cfg.max_len) for o, s in zip(opts, src_lens, strict=True)]
    rows = torch.arange(n, device=dev).repeat_interleave(k)
    state, tokens = state.select(rows), start[rows]  # (n*K,) rows; the memory stays one row per example
    scores = torch.full((n, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # only the first beam expands at step 0
    prefixes: list[list[list[int]]] = [[[] for _ in range(k)] for _ in range(n)]
    active = list(range(n))  # example index of each block of K rows
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    for t in range(max(limits)):
        if should_stop is not None and should_stop():
            raise DecodingStopped(t)
        log_probs, state = model.decode_step(tokens, state)  # (A*K, V)
        at_limit = torch.tensor([limits[ex] == t + 1 for ex in active], device=dev).repeat_interleave(k)
        log_probs = _force_eos(log_probs, at_limit, eos)
        vocab = log_probs.size(-1)
        cand = (scores.view(-1, 1) + log_probs).view(len(active), k * vocab)
        top_scores, top_idx = cand.topk(min(2 * k, k * vocab), dim=1)  # (A, 2K)
        origins, words = (top_idx // vocab).tolist(), (top_idx % vocab).tolist()
        top_scores_l = top_scores.tolist()
        next_rows, next_tokens, next_scores, next_prefixes = [], [], [], []
        next_active, kept = [], []  # example index and block of each example that goes on
        for a, ex in enumerate(active):
            beams: list[tuple[int, int, float]] = []
            for rank, (o, w, s) in enumerate(zip(origins[a], words[a], top_scores_l[a], strict=True)):
                if s == float("-inf"):
                    break
                if w == eos:
                    if rank < k:
                        lp = length_penalty(t + 1, alphas[ex])
                        finished[ex].append(Hypothesis(prefixes[ex][o], s / lp, s))
                elif len(beams) < k:
                    beams.append((o, w, s))
            if len(finished[ex]) >= k or limits[ex] == t + 1 or not beams:
                continue
            beams += [beams[-1][:2] + (float("-inf"),)] * (
                k - len(beams)
            )  # pad a short beam with dead copies
            next_active.append(ex)
            kept.append(a)
            next_rows += [a * k + o for o, _, _ in beams]
            next_tokens += [w for _, w, _ in beams]
            next_scores.append([s for _, _, s in beams])
            next_prefixes.append([prefixes[ex][o] + [w] for o, w, _ in beams])
        if not next_active:
            break
        for ex, p in zip(next_active, next_prefixes, strict=True):
            prefixes[ex] = p
        examples = None if len(kept) == len(active) else torch.tensor(kept, device=dev)
        state = state.select(torch.tensor(next_rows, device=dev), examples)
        tokens = torch.tensor(next_tokens, device=dev)
        scores = torch.tensor(next_scores, device=dev)
        active = next_active
    return [
        sorted(f, key=lambda h: h.score, reverse=True)[: o.num_hypotheses]
        for f, o in zip(finished, opts, strict=True)
    ]


def decode(
    model: Decodable[Any],
    src: Tensor,
    options: Options,
    start_ids: Tensor | None = None,
    should_stop: StopCheck = None,
) -> list[list[Hypothesis]]:
    """Dispatch: beam_size 1 takes the dedicated greedy loop (same tokens as beam search with K=1)."""
    rows = per_row(options, src.size(0), DecodeOptions())
    if rows and rows[0].beam_size == 1:
        return greedy_decode(model, src, options, start_ids, should_stop)
    return beam_search(model, src, options, start_ids, should_stop)

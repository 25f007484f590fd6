"""How far a torch decode's choices were from a tie, for parity tests between decoders that round differently.

Two decoders of one model that compute it by different roads (a batch and one sentence alone, torch and
CTranslate2, ours and transformers) give each log-probability within a few 1e-6 of the other's, not equal.
They give the same tokens wherever each choice is clear by more than that: a greedy step's best and
second-best log-probabilities, or the candidates a beam-search step ranks (its best 2K cumulative scores, EOS
or not). Where a choice is closer to a tie, either answer is right and which one a CPU's kernels give is
chance: a test that asserts equality there holds by luck.

`recorded()` notes, while it is open, how far each choice that model.decoding makes was from a tie (its
*margin*); `with_margin()` gives the smallest margin of one decode, the gaps between its returned hypotheses'
scores included. A parity test then lets two answers differ only for a sentence whose reference decode has
margin < MARGIN (or compares exactly the sentences at >= MARGIN), and asserts that most sentences were
compared.

MARGIN = 1e-4: rounding moved one hypothesis' summed log-probability by at most 4e-6 batched vs alone, 6e-6
ours vs transformers (renormalize_logits), 8e-6 CTranslate2 vs torch on the tiny models and 1.2e-5 on the
shipped fr-en, measured on AVX-512, AVX2 and default kernels (ATEN_CPU_CAPABILITY, CT2_FORCE_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS); a gap between two candidates moves by at most twice that, 2.4e-5: MARGIN is 4x it.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from model.options import Hypothesis

MARGIN = 1e-4
_LOCK = threading.Lock()  # held while recording: one recording at a time (it patches torch.Tensor)
_NOT_SET = object()


def _beam_gaps(values: list[float], indices: list[int], k: int, vocab: int, eos: int | None) -> float:
    """One beam-search step of one example: candidates best first (beam_search's cand.topk, widened by one).
    The step keeps EOS candidates ranked < k as finished and the first k others as beams: what it does changes
    only if two candidates up to the k-th non-EOS one, or that one and the next, swap. eos None (unknown):
    every gap among the 2k + 1 best counts."""
    end = len(values)
    if eos is not None:
        beams = 0
        for rank, (score, index) in enumerate(zip(values, indices, strict=True)):
            if score == -math.inf:
                break
            if index % vocab != eos:
                beams += 1
                if beams == k:
                    end = rank + 2
                    break
    live = [s for s in values[:end] if s != -math.inf]
    return min((a - b for a, b in zip(live, live[1:], strict=False)), default=math.inf)


@contextmanager
def recorded() -> Iterator[list[float]]:
    """While open, every choice of model.decoding's greedy_decode and beam_search (any thread) appends its
    margin to the yielded list: greedy, top-1 minus top-2 log-probability of each row not forced to EOS;
    beam search, the smallest gap that could reorder what each example keeps (`_beam_gaps`). Records only
    calls made from model.decoding (its `log_probs.max(-1)` and `cand.topk(2k)`); should those change,
    nothing is recorded and every margin is inf, so that parity tests compare every sentence, as strict as
    before."""
    gaps: list[float] = []
    saved = {name: torch.Tensor.__dict__.get(name, _NOT_SET) for name in ("max", "topk")}
    original_max, original_topk = torch.Tensor.max, torch.Tensor.topk

    def from_decoding() -> dict[str, Any] | None:
        frame = sys._getframe(2)
        return frame.f_locals if frame.f_globals.get("__name__") == "model.decoding" else None

    def max_(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = original_max(self, *args, **kwargs)
        if args and self.dim() == 2 and self.size(-1) >= 2 and from_decoding() is not None:
            top = original_topk(self.detach().double(), 2, -1).values
            gaps.extend(float(a - b) for a, b in top.tolist() if b != -math.inf)
        return out

    def topk(self: torch.Tensor, k: int, *args: Any, **kwargs: Any) -> Any:
        out = original_topk(self, k, *args, **kwargs)
        local = from_decoding() if self.dim() == 2 else None
        if local is not None:
            beams = max(1, k // 2)  # beam_search asks for its best 2K candidates
            wide = original_topk(self.detach().double(), min(k + 1, self.size(1)), -1)
            for values, indices in zip(wide.values.tolist(), wide.indices.tolist(), strict=True):
                gaps.append(_beam_gaps(values, indices, beams, self.size(1) // beams, local.get("eos")))
        return out

    if not _LOCK.acquire(blocking=False):  # never wait: an event loop's thread may be the one asking
        raise RuntimeError("margins are already being recorded: one recording at a time")
    torch.Tensor.max, torch.Tensor.topk = max_, topk  # type: ignore[method-assign,assignment]
    try:
        yield gaps
    finally:
        for name, value in saved.items():
            if value is _NOT_SET:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, value)
        _LOCK.release()


def with_margin(decode: Callable[[], list[list[Hypothesis]]]) -> tuple[list[list[Hypothesis]], float]:
    """decode() (a torch decode of one sentence, or a few) and its smallest margin: its choices' (`recorded`)
    and the gaps between the scores of each sentence's returned hypotheses (their order; ask for more than one
    to see how close the best one's runner-up was). inf when nothing was chosen (every output forced)."""
    with recorded() as gaps:
        results = decode()
    for hyps in results:
        scores = [h.score for h in hyps]
        gaps += [a - b for a, b in zip(scores, scores[1:], strict=False)]
    return results, min(gaps, default=math.inf)


async def answer_with_margin(client: Any, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """A request's answer (200) from a server running in this process, and the smallest margin of the torch
    decodes it made (its inference threads decode while the request waits: nothing else may decode
    meanwhile), with the gaps between each result's hypotheses' scores (ask for them: num_hypotheses > 1)."""
    with recorded() as gaps:
        r = await client.post(path, json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    for result in answer.get("results", []):
        scores = [h["score"] for h in result.get("hypotheses") or []]
        gaps += [a - b for a, b in zip(scores, scores[1:], strict=False)]
    return answer, min(gaps, default=math.inf)


async def assert_same_answer(
    got: dict[str, Any], want: dict[str, Any], torch_client: Any, body: dict[str, Any]
) -> None:
    """Equal translations; scores equal within 1e-4 (two engines' float32 sums). Except for a text whose
    torch decode, alone, made a choice within MARGIN of a tie (tests/margins.py): the engines round each
    log-probability apart (scores within 8e-6), so either answer is right there. This asserted every text
    equal; the unknown-replacement texts below have beam choices 3e-5 from a tie (replace_unknowns off). At
    most half of an answer's texts (one of a one-text answer) may be excused so."""
    assert got["model"] == want["model"]
    texts = body["texts"] if "texts" in body else [body["text"]]
    excused = 0
    for text, g, w in zip(texts, got["results"], want["results"], strict=True):
        if [g["translation"], *(h["translation"] for h in g.get("hypotheses", []))] != [
            w["translation"],
            *(h["translation"] for h in w.get("hypotheses", [])),
        ]:
            alone = {k: v for k, v in body.items() if k != "text"}
            alone |= {"texts": [text], "num_hypotheses": body.get("beam_size", 4)}  # the runner-up too
            _, margin = await answer_with_margin(torch_client, "/translate", alone)
            assert margin < MARGIN, (g, w, f"torch's choices were clear by >= {margin:.2g}")
            excused += 1
            continue
        assert g.get("score") == pytest.approx(w.get("score"), abs=1e-4)
        assert [h["score"] for h in g.get("hypotheses", [])] == pytest.approx(
            [h["score"] for h in w.get("hypotheses", [])], abs=1e-4
        )
    assert excused <= max(1, len(texts) // 2)

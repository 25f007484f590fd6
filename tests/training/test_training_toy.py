"""End-to-end learnability: tiny models trained for seconds on synthetic tasks must solve them exactly."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from model import (
    DecodeOptions,
    SentimentClassifier,
    Translator,
    beam_search,
    greedy_decode,
    pad_ids,
)
from model.decoding import length_penalty
from tests.conftest import tiny_sentiment_config, tiny_translation_config

PAD, BOS, EOS = 0, 2, 3
N_SYMBOLS = 20
V = 4 + N_SYMBOLS  # specials 0..3, symbols 4..23
Task = Callable[[list[int]], list[int]]
TASKS: dict[str, Task] = {"copy": lambda s: s, "reverse": lambda s: s[::-1]}


def sample(n: int, g: torch.Generator, min_len: int = 3, max_len: int = 8) -> list[list[int]]:
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g).tolist()
    return [(4 + torch.randint(0, N_SYMBOLS, (m,), generator=g)).tolist() for m in lengths]


def repetitive(n: int, g: torch.Generator) -> list[list[int]]:
    """Sequences over 2-4 distinct symbols: runs and repeats ("5 5 5", "15 21 19 19 18 21 21 18"), where
    only counting positions tells the outputs apart. Uniform sampling rarely draws them, and they were what
    the models still got wrong (a length off by one) when their training stopped early."""
    out = []
    for s in sample(n, g):
        m = int(torch.randint(2, 5, (), generator=g))
        pool = (4 + torch.randperm(N_SYMBOLS, generator=g)[:m]).tolist()
        out.append([pool[j] for j in torch.randint(0, m, (len(s),), generator=g).tolist()])
    return out


def held_out(task: str) -> list[list[int]]:
    return sample(100, torch.Generator().manual_seed(100 + len(task)))


def validation(task: str) -> list[list[int]]:
    """Where tests/training/toy_convergence.py watches training converge: unseen in training, and apart
    from held_out (the test's)."""
    return sample(200, torch.Generator().manual_seed(200 + len(task)))


def exact(model: Translator, task: str, seqs: list[list[int]]) -> int:
    """How many of `seqs` greedy decoding maps to exactly TASKS[task](seq)."""
    hyps = greedy_decode(model, pad_ids(seqs, PAD), DecodeOptions(beam_size=1))
    return sum(h.tokens == TASKS[task](s) for s, [h] in zip(seqs, hyps, strict=True))


def warmup_cosine(steps: int, warmup: int = 30) -> Callable[[int], float]:
    return lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))


# A fixed budget, no early stop: the schedule decays to zero, so the model the test reads is the end of a
# converged run, not a lucky moment while the learning rate is still high (an early stop at two exact
# validation checks gave 98/100 held-out on an AMD Zen 3, and here under ATEN_CPU_CAPABILITY=avx2).
# Measured with `python -m tests.training.toy_convergence` on an AMD EPYC Zen 4 under its AVX-512 kernels
# and under ATEN_CPU_CAPABILITY=avx2 and =default (3 seeds x both tasks x 3 kernel sets, 18 runs): every run
# ended with validation 200/200 and held-out 100/100, the smallest right-token probability 0.87-0.99, and
# the last check at which either was not exact was at step 375-625: STEPS leaves 375 more steps, and the
# learning rate's whole decay, as margin. (Training takes about 20 s a model: over the house's 10 s a test,
# the price of a claim that holds on every CPU.)
STEPS = 1000
REPETITIVE = 16  # of each batch of 64: repetitive() sequences


def train_translator(
    task: str,
    steps: int = STEPS,
    batch_size: int = 64,
    seed: int = 0,
    watch: Callable[[int, Translator], None] | None = None,
) -> Translator:
    """Teacher forcing with cross-entropy over non-pad targets, on batches of uniform and repetitive
    sequences; held-out and validation sequences never seen. watch(step, model): every 25 steps, in eval
    mode under inference_mode (toy_convergence's measurements)."""
    torch.manual_seed(seed)
    cfg = tiny_translation_config(
        V, d_model=64, n_heads=4, d_ff=128, max_len=64, source_langs=("src",), target_langs=(task,)
    )
    model = Translator(cfg).train()
    # fused: one kernel for all parameters instead of a Python loop over them (the model is tiny, so that
    # loop is a good part of each step)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps))
    exclude = {tuple(s) for s in held_out(task) + validation(task)}
    g = torch.Generator().manual_seed(seed)
    for step in range(1, steps + 1):
        batch = repetitive(REPETITIVE, g) + sample(batch_size - REPETITIVE, g)
        seqs = [s for s in batch if tuple(s) not in exclude]
        src = pad_ids(seqs, PAD)
        tgt = pad_ids([[BOS, *TASKS[task](s), EOS] for s in seqs], PAD)
        logits = model(src, tgt[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if watch is not None and step % 25 == 0:
            with torch.inference_mode():
                watch(step, model.eval())
            model.train()
    return model.eval()


@pytest.fixture(scope="module")
def copy_model() -> Translator:
    return train_translator("copy")


@pytest.fixture(scope="module")
def reverse_model() -> Translator:
    return train_translator("reverse")


@pytest.mark.slow
@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_translator_learns_task_exactly(task: str, request: pytest.FixtureRequest) -> None:
    model: Translator = request.getfixturevalue(f"{task}_model")
    test = held_out(task)
    assert exact(model, task, test) == len(test)


def scored(model: Translator, src: list[int], outputs: list[list[int]]) -> list[float]:
    """Each output's log p(output + EOS | src) by teacher forcing, in one batch (the decoder is causal: the
    padding after a shorter output changes none of its positions), with the tokens decoding never emits
    (model.banned) at -inf as decode_step does."""
    tgt = pad_ids([[BOS, *o, EOS] for o in outputs], PAD)
    with torch.inference_mode():
        logits = model(torch.tensor([src] * len(outputs)), tgt[:, :-1]).float()
        logits[..., model.banned] = float("-inf")
        lp = logits.log_softmax(-1).gather(-1, tgt[:, 1:, None])[..., 0].masked_fill(tgt[:, 1:] == PAD, 0)
    return lp.sum(-1).tolist()


@pytest.mark.slow
def test_beam_search_on_a_trained_model(reverse_model: Translator) -> None:
    """What beam search guarantees, on a model that has learnt its task: beam 1 is greedy; the n-best is
    sorted and distinct and each score is the model's own; in-distribution the best is the exact reverse.

    It no longer claims "beam 4's best scores at least greedy's": that is not a property of beam search (a
    beam can drop greedy's prefix early and end lower), and it failed on an AMD Zen 3 (-13.41 < -13.25 on
    one longer source). test_beam_search_is_exhaustive_when_the_beam_holds_every_prefix asserts instead
    what the search does find."""
    # in-distribution plus longer, unseen lengths where the model is unsure and the search matters
    test = held_out("reverse") + sample(50, torch.Generator().manual_seed(7), min_len=9, max_len=14)
    src = pad_ids(test, PAD)
    for alpha in (0.0, 0.6, 1.0):
        greedy = greedy_decode(reverse_model, src, DecodeOptions(beam_size=1, length_penalty=alpha))
        one = beam_search(reverse_model, src, DecodeOptions(beam_size=1, length_penalty=alpha))
        assert [h.tokens for [h] in one] == [h.tokens for [h] in greedy]
        assert [h.score for [h] in one] == pytest.approx([h.score for [h] in greedy], abs=1e-5)
        opts = DecodeOptions(beam_size=4, num_hypotheses=3, length_penalty=alpha)
        for s, hyps in zip(test, beam_search(reverse_model, src, opts), strict=True):
            assert len(hyps) == 3
            assert len({tuple(h.tokens) for h in hyps}) == 3
            scores = [h.score for h in hyps]
            assert scores == sorted(scores, reverse=True)
            model_lp = scored(reverse_model, s, [h.tokens for h in hyps])
            assert [h.log_prob for h in hyps] == pytest.approx(model_lp, abs=1e-4)
            if len(s) <= 8:
                assert hyps[0].tokens == s[::-1]


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_is_exhaustive_when_the_beam_holds_every_prefix(
    reverse_model: Translator, alpha: float
) -> None:
    """With outputs of at most 2 tokens (a length limit of 3, EOS included), every output is one of 1 + W +
    W**2 (W: the tokens decoding may emit), and a beam of 512 holds every prefix: beam search is then an
    exhaustive search, and its best is the best of all outputs by the model's own scores (to rounding)."""
    words = [t for t in range(V) if t != EOS and t not in set(reverse_model.banned.tolist())]
    outputs = [list(o) for n in range(3) for o in itertools.product(words, repeat=n)]
    assert len(outputs) <= 512
    opts = DecodeOptions(
        beam_size=512, num_hypotheses=5, length_penalty=alpha, max_length=3, max_length_offset=0
    )
    srcs = held_out("reverse")[:4]
    for s, hyps in zip(srcs, beam_search(reverse_model, pad_ids(srcs, PAD), opts), strict=True):
        exhaustive = [
            lp / length_penalty(len(o) + 1, alpha)
            for o, lp in zip(outputs, scored(reverse_model, s, outputs), strict=True)
        ]
        best = max(exhaustive)
        assert hyps[0].score == pytest.approx(best, abs=1e-4)
        assert exhaustive[outputs.index(hyps[0].tokens)] >= best - 1e-4
        # its n-best are the 5 best outputs, in order (to rounding)
        assert [h.score for h in hyps] == pytest.approx(sorted(exhaustive, reverse=True)[:5], abs=1e-4)


def token_rule_batch(n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Label 1 iff token 5 occurs; half the sequences get a 5 at a random position."""
    seqs, labels = [], []
    for s in sample(n, g, min_len=3, max_len=10):
        s = [t if t != 5 else 6 for t in s]
        if torch.rand((), generator=g) < 0.5:
            s[int(torch.randint(0, len(s), (), generator=g))] = 5
        seqs.append(s)
        labels.append(int(5 in s))
    return pad_ids(seqs, PAD), torch.tensor(labels)


@pytest.mark.slow
def test_classifier_learns_a_token_rule() -> None:
    torch.manual_seed(0)
    model = SentimentClassifier(tiny_sentiment_config(V)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        ids, labels = token_rule_batch(64, g)
        loss = F.cross_entropy(model(ids), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    ids, labels = token_rule_batch(400, torch.Generator().manual_seed(1))
    accuracy = (model.eval().predict(ids).argmax(-1) == labels).float().mean().item()
    assert accuracy >= 0.95

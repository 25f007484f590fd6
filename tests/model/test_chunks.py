"""length_sorted_chunks: every index once, longest first, at most batch_size, buckets only when they pay."""

from __future__ import annotations

import random

import pytest
import torch

from model.inference import (
    FORWARD_COST_TOKENS,
    GPU_FORWARD_COST_TOKENS,
    anchored_sizes,
    anchors_of,
    forward_cost_tokens,
    length_sorted_chunks,
    positional_sizes,
)


def _check_partition(chunks: list[list[int]], lengths: list[int], batch_size: int) -> None:
    flat = [i for c in chunks for i in c]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(1 <= len(c) <= batch_size for c in chunks)
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)


@pytest.mark.parametrize("forward_cost", [0, 1, 64, 10**6])
def test_chunks_partition_the_inputs(forward_cost: int) -> None:
    rng = random.Random(0)
    for n in (0, 1, 5, 32, 33, 100):
        lengths = [rng.randint(1, 60) for _ in range(n)]
        _check_partition(length_sorted_chunks(lengths, 32, forward_cost), lengths, 32)


def test_equal_cuts_without_a_forward_cost() -> None:
    assert [len(c) for c in length_sorted_chunks([5] * 70, 32)] == [32, 32, 6]


def test_buckets_split_mixed_lengths_when_the_padding_saved_outweighs_a_pass() -> None:
    lengths = [100] * 4 + [5] * 28  # one chunk pads 28 short texts to 100 tokens
    chunks = length_sorted_chunks(lengths, 32, forward_cost=64)
    assert [sorted(lengths[i] for i in c) for c in chunks] == [[100] * 4, [5] * 28]
    # equal lengths: one pass is cheapest; a huge pass cost never splits below batch_size
    assert len(length_sorted_chunks([7] * 32, 32, forward_cost=64)) == 1
    assert len(length_sorted_chunks(lengths, 32, forward_cost=10**6)) == 1


def _cost(sl: list[int], sizes: list[int], forward_cost: int) -> int:
    total, i = 0, 0
    for size in sizes:
        total += forward_cost + size * sl[i]  # sl sorted longest first: a chunk's first is its longest
        i += size
    return total


@pytest.mark.parametrize("forward_cost", [1, 7, 64, 500])
@pytest.mark.parametrize("batch_size", [1, 3, 8, 32, 512])
def test_the_anchored_search_finds_the_positional_optimum(forward_cost: int, batch_size: int) -> None:
    """Both searches are exact: on runs of equal lengths (a GPU's batches), on all-distinct lengths and on
    a single length, the same least cost, in chunks that partition the items within batch_size."""
    rng = random.Random(batch_size * 1000 + forward_cost)
    for _ in range(40):
        n = rng.choice([1, 2, 5, 31, 64, 200])
        spread = rng.choice([1, 3, 12, 60, 10**4])  # few distinct lengths ... all distinct
        sl = sorted((rng.randint(1, spread) for _ in range(n)), reverse=True)
        anchors = anchors_of(sl)
        slow, fast = (
            positional_sizes(sl, batch_size, forward_cost),
            anchored_sizes(sl, anchors, batch_size, forward_cost),
        )
        assert sum(fast) == n
        assert all(1 <= s <= batch_size for s in fast)
        assert _cost(sl, fast, forward_cost) == _cost(sl, slow, forward_cost), (sl, slow, fast)


def test_a_large_batch_of_few_lengths_takes_the_anchored_search() -> None:
    """512 texts of 20 distinct lengths: 21 anchors, so the O(R^2) search runs (its answer: the optimum)."""
    rng = random.Random(1)
    lengths = [rng.randint(5, 24) for _ in range(512)]
    chunks = length_sorted_chunks(lengths, 512, forward_cost=64)
    _check_partition(chunks, lengths, 512)
    sl = sorted(lengths, reverse=True)
    assert _cost(sl, [len(c) for c in chunks], 64) == _cost(sl, positional_sizes(sl, 512, 64), 64)


def test_a_gpu_runs_a_batch_of_short_texts_as_one_forward() -> None:
    """A GPU's forward costs its launches, not its tokens: the 256 short texts a CUDA batch holds (6-17
    tokens, as bench.scale sends) go as one chunk there, and as length buckets on a CPU."""
    cpu, cuda = forward_cost_tokens(torch.device("cpu")), forward_cost_tokens(torch.device("cuda"))
    assert (cpu, cuda) == (FORWARD_COST_TOKENS, GPU_FORWARD_COST_TOKENS)
    lengths = [random.Random(i).randint(6, 17) for i in range(256)]
    assert len(length_sorted_chunks(lengths, 512, cpu)) > 1
    assert len(length_sorted_chunks(lengths, 512, cuda)) == 1
    # a long text among short ones still runs apart: padding every short one to it costs more than a pass
    assert len(length_sorted_chunks([400] + lengths, 512, cuda)) == 2

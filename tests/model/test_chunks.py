"""length_sorted_chunks: every index once, longest first, at most batch_size, buckets only when they pay."""

from __future__ import annotations

import random

import pytest

from model.inference import length_sorted_chunks


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

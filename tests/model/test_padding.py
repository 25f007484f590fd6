"""pad_ids: the (B, S) batch of ragged id lists, as padding each list by hand gives."""

from __future__ import annotations

import random

import pytest
import torch

from model.preprocess import pad_ids


def _by_hand(seqs: list[list[int]], pad_id: int) -> list[list[int]]:
    width = max(len(s) for s in seqs)
    return [s + [pad_id] * (width - len(s)) for s in seqs]


@pytest.mark.parametrize("rows", [1, 2, 7, 64, 300])
def test_pad_ids_matches_padding_by_hand(rows: int) -> None:
    rng = random.Random(rows)
    seqs = [[rng.randrange(1, 64_000) for _ in range(rng.randint(1, 80))] for _ in range(rows)]
    got = pad_ids(seqs, 3)
    assert got.dtype == torch.long
    assert got.tolist() == _by_hand(seqs, 3)


@pytest.mark.parametrize("copies", [1, 100])  # a nested list, then array ops (ARRAY_PAD_MIN)
def test_pad_ids_keeps_large_ids_and_empty_rows(copies: int) -> None:
    seqs = [[2**40, 7], [], [5]] * copies
    assert pad_ids(seqs, -1).tolist() == [[2**40, 7], [-1, -1], [5, -1]] * copies

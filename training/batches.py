"""Length-bucketed batches by padded token count, deterministic per (seed, epoch) so training can resume."""

from __future__ import annotations

import random
from collections.abc import Sequence


def token_batches(
    lengths: Sequence[int], batch_tokens: int, seed: int, epoch: int, pool: int = 100, max_batch: int = 4096
) -> list[list[int]]:
    """Indices grouped so that len(batch) * max(length in batch) <= batch_tokens.

    Examples are shuffled, sorted by length inside pools of `pool` batches' worth of examples (limits padding
    while keeping randomness), cut into batches, and the batch order is shuffled. Same (seed, epoch) -> same list.
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mean_len = max(1, sum(lengths) // max(1, len(lengths)))
    chunk = max(1, pool * batch_tokens // mean_len)
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batch: list[int] = []
        longest = 0
        for i in part:
            longest_if = max(longest, lengths[i])
            if batch and (longest_if * (len(batch) + 1) > batch_tokens or len(batch) >= max_batch):
                batches.append(batch)
                batch, longest_if = [], lengths[i]
            batch.append(i)
            longest = longest_if
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def shard(batches: list[list[int]], rank: int, world: int) -> list[list[int]]:
    """Every rank gets the same number of batches (DDP steps must match); the remainder is dropped."""
    n = len(batches) // world * world
    return batches[rank:n:world]

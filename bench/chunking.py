"""Length buckets per batch (model.inference.length_sorted_chunks): the exact search over every position against the one over anchors.

  python -m bench.chunking [--repeats 5]

A batch of n texts of random lengths (5-40 tokens, a classifier's short texts) cut into buckets with the
served forward cost (model.inference.FORWARD_COST_TOKENS), batch_size = n (a CPU batch is 32, a GPU's up to
512: app.core.settings.machine.CUDA_BATCH). Per n: ms per batch and µs per text on the inference thread,
for each search and for what length_sorted_chunks runs (sorting included); both searches find the same cost.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from functools import partial

from bench.machine import describe
from model.inference import (
    FORWARD_COST_TOKENS,
    anchored_sizes,
    anchors_of,
    length_sorted_chunks,
    positional_sizes,
)

SIZES = (32, 128, 512, 1024)


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def cost(sl: list[int], sizes: list[int]) -> int:
    """What both searches minimise: per chunk, the forward cost plus its size times its longest."""
    total, i = 0, 0
    for size in sizes:
        total, i = total + FORWARD_COST_TOKENS + size * sl[i], i + size
    return total


def rows(repeats: int, sizes: tuple[int, ...] = SIZES) -> list[tuple[int, int, float, float, float]]:
    """Per n: (n, anchors, positional ms, anchored ms, length_sorted_chunks ms)."""
    rng, out = random.Random(0), []
    for n in sizes:
        lengths = [rng.randint(5, 40) for _ in range(n)]
        sl = sorted(lengths, reverse=True)
        anchors = anchors_of(sl)
        assert cost(sl, positional_sizes(sl, n, FORWARD_COST_TOKENS)) == cost(
            sl, anchored_sizes(sl, anchors, n, FORWARD_COST_TOKENS)
        )
        out.append((
            n, len(anchors),
            best_ms(partial(positional_sizes, sl, n, FORWARD_COST_TOKENS), repeats),
            best_ms(partial(anchored_sizes, sl, anchors, n, FORWARD_COST_TOKENS), repeats),
            best_ms(partial(length_sorted_chunks, lengths, n, FORWARD_COST_TOKENS), repeats),
        ))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    print(  # noqa: T201
        f"# {describe()}; best of {args.repeats}\n"
        "| texts a batch | anchors | every position ms | anchors ms | served ms | served µs a text |\n"
        "|---:|---:|---:|---:|---:|---:|"
    )
    for n, anchors, positional, anchored, served in rows(args.repeats):
        print(
            f"| {n} | {anchors} | {positional:.3f} | {anchored:.3f} | {served:.3f} | {served / n * 1000:.2f} |"
        )  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

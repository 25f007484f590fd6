"""Batches cut into length buckets: indices sorted by length, longest first, cut where the padding saved pays
for another forward pass. Shared by the classifier, torch decoding and the CTranslate2 engine."""

from __future__ import annotations

from collections.abc import Sequence


def length_sorted_chunks(lengths: Sequence[int], batch_size: int, forward_cost: int = 0) -> list[list[int]]:
    """Indices sorted by length (longest first) and cut into chunks of at most batch_size.

    forward_cost=0: equal cuts. Otherwise the cuts minimise sum(forward_cost + size * longest) over chunks,
    exactly, by dynamic programming: a batch of 32 mixed lengths runs as a few length buckets when the padding
    saved outweighs the extra passes. Over every position that is O(n * batch_size) steps; over the positions
    where the length changes (R of them) O(R^2): the cheaper of the two runs. A CPU's batch of 32 takes the
    first; a GPU's batch of 512 holds a few dozen distinct lengths and takes the second."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    n = len(order)
    if forward_cost <= 0:
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    sl = [lengths[i] for i in order]
    anchors = anchors_of(sl)
    if 4 * len(anchors) ** 2 < n * min(n, batch_size):  # an anchor pair costs about 4 positional steps
        sizes = anchored_sizes(sl, anchors, batch_size, forward_cost)
    else:
        sizes = positional_sizes(sl, batch_size, forward_cost)
    chunks, i = [], 0
    for size in sizes:
        chunks.append(order[i : i + size])
        i += size
    return chunks


def anchors_of(sl: Sequence[int]) -> list[int]:
    """0, each position where the sorted lengths `sl` change, and len(sl) ([0] when empty)."""
    n = len(sl)
    return [0, *(p for p in range(1, n) if sl[p] != sl[p - 1]), n] if n else [0]


def positional_sizes(sl: Sequence[int], batch_size: int, forward_cost: int) -> list[int]:
    """The optimal chunk sizes of lengths `sl` (sorted, longest first), a cut considered at every position:
    best[i], the cost of items i.., tries every end of the chunk that starts at i."""
    n = len(sl)
    best, cut = [0] * (n + 1), [n] * (n + 1)  # best[i]: cost of items i.., first chunk ends at cut[i]
    for i in range(n - 1, -1, -1):
        best[i] = forward_cost + sl[i] + best[i + 1]
        cut[i] = i + 1
        for j in range(i + 2, min(n, i + batch_size) + 1):
            cost = forward_cost + (j - i) * sl[i] + best[j]  # sl[i] is the chunk's longest
            if cost < best[i]:
                best[i], cut[i] = cost, j
    sizes, i = [], 0
    while i < n:
        sizes.append(cut[i] - i)
        i = cut[i]
    return sizes


def anchored_sizes(
    sl: Sequence[int], anchors: Sequence[int], batch_size: int, forward_cost: int
) -> list[int]:
    """The same optimum, searched over the anchors (0, n and each position where the length changes) alone.

    Why that suffices: take a cut inside a run of equal lengths, with a chunk after it that is not full.
    Moving the last item before the cut into that chunk changes the cost by (the run's length - the longest
    of the chunk before) <= 0. So some optimum has, between two anchors a < b that are cuts, one chunk
    [a, b - (m-1) * batch_size) and then m-1 full chunks, m = ceil((b - a) / batch_size); a full chunk that
    starts at p costs forward_cost + batch_size * sl[p], summed in O(1) from strided prefix sums."""
    n, bs = len(sl), batch_size
    strided = [0] * n  # strided[p] = sl[p] + sl[p - bs] + sl[p - 2 bs] + ...
    for p in range(n):
        strided[p] = sl[p] + (strided[p - bs] if p >= bs else 0)

    def full_chunks(b: int, m: int) -> int:  # sum of sl[b - k * bs] for k = 1 .. m-1
        hi, lo = b - bs, b - m * bs
        return (strided[hi] if hi >= 0 else 0) - (strided[lo] if lo >= 0 else 0)

    best = {n: 0}
    step: dict[int, tuple[int, int]] = {}  # anchor -> (next anchor cut, chunks between)
    for k in range(len(anchors) - 2, -1, -1):
        a = anchors[k]
        for b in anchors[k + 1 :]:
            m = -(-(b - a) // bs)
            cost = m * forward_cost + (b - a - (m - 1) * bs) * sl[a] + bs * full_chunks(b, m) + best[b]
            if a not in best or cost < best[a]:
                best[a], step[a] = cost, (b, m)
    sizes, a = [], 0
    while a < n:
        b, m = step[a]
        sizes += [b - a - (m - 1) * bs] + [bs] * (m - 1)
        a = b
    return sizes

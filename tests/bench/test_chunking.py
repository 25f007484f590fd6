"""bench.chunking: a row per batch size, anchors no more than distinct lengths + 1."""

from __future__ import annotations

from bench.chunking import rows


def test_a_row_per_batch_size() -> None:
    out = rows(1, (8, 64))
    assert [n for n, *_ in out] == [8, 64]
    assert all(2 <= anchors <= min(n, 36) + 1 for n, anchors, *_ in out)
    assert all(served > 0 for *_, served in out)

"""bench.paired's table: medians of each checkout and the ratio of each round, not the ratio of medians."""

from __future__ import annotations

from bench.paired import table


def test_the_table_gives_each_rounds_ratio_and_their_median() -> None:
    rates = {
        ("1 text", "this"): [110.0, 90.0, 100.0],
        ("1 text", "baseline"): [100.0, 100.0, 80.0],
        ("64 texts", "this"): [640.0, 640.0, 640.0],
        ("64 texts", "baseline"): [640.0, 320.0, 1280.0],
    }
    rows = table(rates)
    assert rows[2] == "| 1 text | 64 | 100 | 100 | 1.10, 0.90, 1.25 | 1.100 |"
    assert rows[3] == "| 64 texts | 16 | 640 | 640 | 1.00, 2.00, 0.50 | 1.000 |"

"""bench.softmax_rows: its table, one row per score shape and key count."""

from __future__ import annotations

import pytest

from bench.softmax_rows import KEYS, SHAPES, main


def test_the_table_has_a_row_per_shape_and_key_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--repeats", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    body = [line for line in lines if line.startswith("| ") and line[2].isalpha() and "scores" not in line]
    assert len(body) == len(SHAPES) * len(KEYS)
    assert all(line.endswith("× |") for line in body)

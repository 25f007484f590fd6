"""bench/langid.py on a few texts of each test split (skipped when ../shared/data is absent)."""

from __future__ import annotations

import pytest

from bench.langid import main
from training.data import resolve_data_dir


@pytest.mark.skipif(not (resolve_data_dir() / "nsmc").is_dir(), reason="../shared/data is absent")
def test_prints_a_row_per_candidate_and_the_sentiment_routing(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--n", "20", "--candidates", "py3langid"])
    out = capsys.readouterr().out
    [row] = [line.split("|") for line in out.splitlines() if line.startswith("| py3langid |")]
    assert float(row[8]) >= 90  # accuracy on all 100 texts, in percent
    assert "| Hangul rule (served) |" in out

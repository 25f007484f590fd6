"""The hand-labelled short-text probes of the classifiers (training/probes/README.md)."""

from __future__ import annotations

import json

import pytest

from training.data import read_probe
from training.ship import PROBES


@pytest.mark.parametrize(("lang", "least"), [("en", 100), ("ko", 50)])
def test_the_shipped_probes(lang: str, least: int) -> None:
    rows = read_probe(PROBES / f"{lang}.jsonl", ("negative", "positive"))
    assert len(rows) >= least
    assert len({r.text for r in rows}) == len(rows)
    assert {r.label for r in rows} == {0, 1}
    assert {"negation", "contrast", "intensifier", "verdict"} <= {r.kind for r in rows}


def test_the_probe_readme_counts_what_the_files_hold() -> None:
    readme = (PROBES / "README.md").read_text()
    for lang in ("en", "ko"):
        rows = [json.loads(line) for line in (PROBES / f"{lang}.jsonl").read_text().splitlines()]
        neg = sum(r["label"] == "negative" for r in rows)
        assert f"| `{lang}.jsonl` | {len(rows)} | {neg} | {len(rows) - neg} |" in readme

"""bench/sentences.py on the splitter corpus prints a row per splitter (the served one passes every case)."""

from __future__ import annotations

import pytest

from bench.sentences import main


def test_the_served_splitter_passes_what_the_regex_did_not(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--candidates", "regex,served"])
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    passed = {row[1].strip(): row[6].strip().split("/") for row in rows[1:]}  # name -> [passed, cases]
    assert passed["served"][0] == passed["served"][1]
    assert int(passed["regex"][0]) < int(passed["served"][0]) / 2

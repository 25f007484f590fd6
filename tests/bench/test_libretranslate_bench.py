"""bench/libretranslate.py runs end to end on the tiny checkpoints and prints its table (a smoke test, no
timing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.libretranslate import main


@pytest.mark.slow
def test_libretranslate_bench_prints_both_modes(
    bench_translator_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--checkpoint-dir", str(bench_translator_dir), "--concurrency", "4", "--duration", "0.3"]
    argv += ["--set", "APP_TORCHSCRIPT=false"]  # tracing is tested in tests/model and tests/app
    assert main(argv) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [r[1].strip() for r in rows] == ["one request per forward pass", "batched (default)"]
    assert all(float(r[2]) > 0 and r[6].strip() == "0" for r in rows), rows  # req/s, no errors
    assert float(rows[0][5]) == 1.0  # APP_MAX_BATCH_SIZE=1: one sentence per forward pass

"""bench/serve_load.py runs end to end on the tiny checkpoints and prints its tables (a smoke test, no timing)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.serve_load import main


@pytest.mark.parametrize("use_wrk", ["no", "yes"] if shutil.which("wrk") else ["no"])
def test_serve_load_prints_every_table(
    app_checkpoint_dir: Path, capsys: pytest.CaptureFixture[str], use_wrk: str
) -> None:
    argv = ["--checkpoint-dir", str(app_checkpoint_dir), "--duration", "1", "--concurrency", "1", "4"]
    assert main([*argv, "--wrk", use_wrk]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| /")]
    cells = [r for r in rows if r.count("|") == 12]  # route, batching, concurrency, ... per measurement
    assert len(cells) == 2 * 2 * 2  # 2 routes x batching on/off x 2 concurrencies
    for row in cells:
        fields = [f.strip() for f in row.strip("|").split("|")]
        assert float(fields[3]) > 0, row  # req/s
        assert fields[7] == "0", row  # no errors
        assert float(fields[9]) > 0, row  # server CPU per request was measured
    assert "in-process ceiling" in out
    assert "ready within 5 s of start (batching on)" in out

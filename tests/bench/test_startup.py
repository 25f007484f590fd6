"""bench/startup.py: the log timeline it reads and the HTTP process's steps it times (its launches: the
bench's own run, BENCHMARKS.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from bench.server import REPO
from bench.startup import HTTP_PROBE, log_times, probe


def test_log_times_reads_the_supervisor_model_http_and_graph_lines() -> None:
    start = datetime(2026, 11, 28, 3, 0, 0).timestamp()
    log = "\n".join([
        "2026-11-28 03:00:01,500 INFO app.parallel [-]: serving on 127.0.0.1:1 from 2 HTTP processes (1, 2)",
        "2026-11-28 03:00:03,000 INFO uvicorn.error [-]: Application startup complete.",
        "2026-11-28 03:00:04,250 INFO uvicorn.error [-]: Application startup complete.",
        "2026-11-28 03:00:09,000 INFO app.runtime.lifecycle [-]: ready: sentiment-en, translate-fr-en",
        "not a log line: ready: nothing",
        "2026-11-28 03:00:10,500 INFO app.runtime.lifecycle [-]: graphs ready in 1.5 s: sentiment-en ready",
    ])  # fmt: skip
    assert log_times(log, start) == (1.5, 9.0, 4.25, 10.5)


def test_the_http_probe_times_each_step_without_torch(bench_checkpoint_dir: Path) -> None:
    steps = probe(REPO, HTTP_PROBE, bench_checkpoint_dir)
    assert steps.pop("torch imported") is False
    assert list(steps) == ["imports", "routing registry", "language detector", "tokenizers"]
    assert all(wall >= 0 and cpu >= 0 for wall, cpu in steps.values())  # type: ignore[misc]

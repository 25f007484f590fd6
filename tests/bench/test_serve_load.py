"""bench/serve_load.py runs end to end on the tiny checkpoints and prints its tables (a smoke test, no timing):
fractions of a second per cell and one timed run per ceiling. A run's two servers cost most of it: the runs
that change only what the client sends (routes, texts per request, the /sentiment model, passes, the load
generator) share one module-scoped pair; the ctranslate2 run starts its own through main()."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.ceilings import ARRIVAL, WORKERS
from bench.load import EN_WORDS, KO_WORDS, Cell, sentiment_bodies, sentiment_texts, texts
from bench.report import median_pass
from bench.serve_load import MODES, main, parse_args, run, server_envs
from bench.server import serve_many

DURATION = "0.3"  # seconds per cell: enough requests for every column (CPU is read in 10 ms ticks)
# servers and ceilings without TorchScript: tracing is tested in tests/model and tests/app, here it would
# only lengthen every server's start
EAGER = ("--set", "APP_TORCHSCRIPT=false")
Servers = tuple[dict[str, dict[str, str]], dict[str, tuple[str, float, int]]]  # settings, (url, ready s, pid)


@pytest.fixture(scope="module")
def servers(bench_checkpoint_dir: Path) -> Iterator[Servers]:
    """The bench's two servers (batching on, off) for the EAGER runs; side by side, as no test here reads a
    ready time (main() starts them one after the other)."""
    envs = server_envs(parse_args(["--checkpoint-dir", str(bench_checkpoint_dir), *EAGER]))
    with serve_many(bench_checkpoint_dir, list(envs.values()), side_by_side=True) as started:
        yield envs, dict(zip(MODES, started, strict=True))


@pytest.mark.slow
def test_serve_load_sentiment_model_picks_the_model_and_its_language(
    bench_checkpoint_dir: Path, capsys: pytest.CaptureFixture[str], servers: Servers
) -> None:
    pick = ["--routes", "/sentiment", "--sentiment-model"]
    out = _bench(bench_checkpoint_dir, capsys, ["2"], *pick, "sentiment-ko", servers=servers)
    assert "/sentiment model: sentiment-ko" in out
    _check_tables(out, texts=1, routes=1, concurrencies=1)
    korean = sentiment_texts(bench_checkpoint_dir, {"model": "sentiment-ko"})
    assert {w for t in korean for w in t.rstrip(".").split()} <= set(KO_WORDS)  # Korean words only
    assert sentiment_texts(bench_checkpoint_dir, {"model": "sentiment-en"}) == texts(EN_WORDS)
    with pytest.raises(SystemExit, match="no sentiment model 'sentiment-xx'"):
        _bench(bench_checkpoint_dir, capsys, ["2"], *pick, "sentiment-xx")  # before any server starts


@pytest.mark.slow
@pytest.mark.parametrize("use_wrk", ["no", "yes"] if shutil.which("wrk") else ["no"])
def test_serve_load_prints_every_table(
    bench_checkpoint_dir: Path, capsys: pytest.CaptureFixture[str], servers: Servers, use_wrk: str
) -> None:
    out = _bench(bench_checkpoint_dir, capsys, ["1", "4"], "--wrk", use_wrk, servers=servers)
    _check_tables(out, texts=1)
    model_only = [line for line in out.splitlines() if line.startswith("| /sentiment, ")]
    assert [line.split("|")[1].strip() for line in model_only] == [ARRIVAL, WORKERS]
    assert all(float(line.split("|")[2]) > 0 for line in model_only), model_only  # texts/s
    assert "HTTP vs the server's model work" in out
    assert "| /translate c=4 HTTP >= 90% of its ceiling (texts/s) |" in out
    assert "| (for reference) server CPU per /sentiment request, c=4 |" in out


@pytest.mark.slow
def test_serve_load_with_several_texts_per_request(
    bench_checkpoint_dir: Path, capsys: pytest.CaptureFixture[str], servers: Servers
) -> None:
    several = ["--routes", "/sentiment", "--texts-per-request", "4"]
    out = _bench(bench_checkpoint_dir, capsys, ["1", "4"], *several, servers=servers)
    _check_tables(out, texts=4, routes=1)


def test_sentiment_bodies_send_every_text_equally_often() -> None:
    items = [f"t{i}" for i in range(5)]
    assert sentiment_bodies(items, 1, {"model": "m"}) == [{"text": t, "model": "m"} for t in items]
    bodies = sentiment_bodies(items, 3, {})
    assert [b["texts"] for b in bodies[:2]] == [["t0", "t1", "t2"], ["t3", "t4", "t0"]]
    sent = [t for b in bodies for t in b["texts"]]
    assert len(bodies) == 5
    assert all(sent.count(t) == 3 for t in items)


def _bench(
    checkpoint_dir: Path,
    capsys: pytest.CaptureFixture[str],
    concurrency: list[str],
    *args: str,
    servers: Servers | None = None,
) -> str:
    """Run the bench (httpx client unless args pick --wrk; EAGER settings) on the shared `servers`, or with
    its own through main() -> what it printed."""
    argv = ["--checkpoint-dir", str(checkpoint_dir), "--duration", DURATION, "--concurrency", *concurrency]
    argv += ["--ceiling-runs", "1", *EAGER, *(args if "--wrk" in args else ("--wrk", "no", *args))]
    if servers is None:
        assert main(argv) == 0
    else:
        envs, started = servers
        assert server_envs(args := parse_args(argv)) == envs  # the settings the servers were started with
        assert run(args, started) == 0
    return capsys.readouterr().out


def _check_tables(out: str, texts: int, routes: int = 2, concurrencies: int = 2) -> None:
    rows = [line for line in out.splitlines() if line.startswith("| /")]
    cells = [r for r in rows if r.count("|") == 14]  # route, batching, concurrency, ... per measurement
    assert len(cells) == routes * 2 * concurrencies  # routes x batching on/off x concurrencies
    for row in cells:
        fields = [f.strip() for f in row.strip("|").split("|")]
        assert float(fields[3]) > 0, row  # req/s
        assert float(fields[4]) == pytest.approx(
            float(fields[3]) * texts, rel=0.01, abs=0.05 * texts + 0.05
        ), row  # texts/s
        assert fields[8] == "0", row  # no errors
        assert float(fields[10]) > 0, row  # server CPU per request was measured
        # of which the event-loop thread's (read in 10 ms ticks: may be 0 on a short run)
        assert 0 <= float(fields[11]) <= float(fields[10]), row
    assert "in-process ceiling" in out
    assert "ready within 5 s of start (batching on)" in out


@pytest.mark.slow
def test_serve_load_repeats_report_medians_and_every_pass(
    bench_checkpoint_dir: Path, capsys: pytest.CaptureFixture[str], servers: Servers
) -> None:
    repeats = ["--routes", "/sentiment", "--repeats", "2"]
    out = _bench(bench_checkpoint_dir, capsys, ["4"], *repeats, servers=servers)
    _check_tables(out.split("Medians of")[0], texts=1, routes=1, concurrencies=1)
    assert "Medians of 2 passes" in out
    per_pass = [line for line in out.split("Per pass:")[1].splitlines() if line[:4] in ("| 1 ", "| 2 ")]
    assert len(per_pass) == 2


@pytest.mark.slow
def test_serve_load_with_the_ctranslate2_engine(
    bench_translator_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ctranslate2")
    out = _bench(bench_translator_dir, capsys, ["2"], "--routes", "/translate", "--engine", "ctranslate2")
    assert "/translate engine: ctranslate2" in out
    _check_tables(out, texts=1, routes=1, concurrencies=1)


def test_median_pass_keeps_each_cells_median_pass() -> None:
    def cell(rps: float) -> Cell:
        return Cell("/sentiment", "on", 64, rps, rps, 0.0, 0.0, 0, "wrk")

    passes = [([cell(r)], {"on": r}, {"/sentiment": (10 * r, 1.0)}, r) for r in (3.0, 1.0, 2.0)]
    cells, ready, ceil, short = median_pass(passes)  # type: ignore[arg-type]
    assert [(c.rps, c.p50) for c in cells] == [(2.0, 2.0)]  # the median pass's cell, latencies included
    assert ready == {"on": 2.0}
    assert ceil == {"/sentiment": (20.0, 1.0)}
    assert short == 2.0

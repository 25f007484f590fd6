"""Load test of the HTTP server against the in-process model-only ceiling, printed as markdown tables.

  python bench/serve_load.py [--checkpoint-dir checkpoints] [--duration 5] [--concurrency 1 8 64] [--wrk auto]
                             [--repeats 3] [--sentiment-model sentiment-ko]

Starts `python -m app` itself on a free 127.0.0.1 port, twice: batching on (the default settings) and off
(APP_MAX_BATCH_SIZE=1). For /sentiment and /translate at each concurrency it reports throughput and
p50/p95/p99 latency, one text per request (`--texts-per-request N` for /sentiment), with `wrk`
(bench/wrk/post.lua) when installed: a Python client tops out near 150 req/s on 2 cores and takes CPU from
the server (`--wrk no` falls back to an httpx async client). The ceiling runs model.inference directly on the
same inputs in batches of 32. /sentiment inputs are in the model's language: English for sentiment-en (the
default), Korean for `--sentiment-model sentiment-ko`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.server_process import free_port, server_env, stop, wait_ready  # noqa: E402

if TYPE_CHECKING:
    from app.settings import Settings
    from model import LoadedModel

WRK_SCRIPT = REPO / "bench" / "wrk" / "post.lua"
SHORT_TEXTS = {"en": "A wonderful film.", "ko": "정말 재미있는 영화."}  # the single short /sentiment request
EN_WORDS = [
    "the",
    "film",
    "story",
    "acting",
    "music",
    "was",
    "very",
    "quite",
    "not",
    "really",
    "good",
    "bad",
    "boring",
    "wonderful",
    "great",
    "awful",
    "plot",
    "ending",
]
FR_WORDS = [
    "le",
    "chat",
    "chien",
    "film",
    "livre",
    "maison",
    "aime",
    "voit",
    "lit",
    "trouve",
    "très",
    "bon",
    "beau",
    "petit",
    "grand",
    "avec",
    "la",
    "une",
    "un",
]
KO_WORDS = [  # for a Korean sentiment model (sentiment-ko): review vocabulary, as NSMC
    "영화",
    "정말",
    "재미있다",
    "최고",
    "별로",
    "지루하다",
    "배우",
    "연기",
    "스토리",
    "너무",
    "좋다",
    "나쁘다",
    "감동",
    "시간",
    "아깝다",
    "음악",
    "결말",
    "완전",
]
WORDS = {"ko": KO_WORDS}  # /sentiment inputs by the model's first source language; others: EN_WORDS


@dataclass
class Cell:
    route: str
    mode: str
    concurrency: int
    rps: float
    p50: float  # ms
    p95: float
    p99: float
    errors: int
    client: str
    texts: int = 1  # texts per request
    server_cpu_ms: float = float("nan")  # CPU time of the server process (all threads) per request
    # of which the event-loop (main) thread: HTTP, JSON, tokenizing, batching
    loop_cpu_ms: float = float("nan")
    client_cpu_ms: float = float("nan")  # CPU time of the load generator per request


ARRIVAL = "/sentiment, arrival order"  # a second /sentiment ceiling: unsorted batches of 32
WORKERS = "/sentiment, server's model work"  # a third: the server's inference workers' own code, no HTTP
SENTENCE_WORDS = (3, 5, 8, 12, 20)  # translation inputs: sentence-sized, like the Tatoeba test set


def texts(
    words: list[str], n: int = 200, seed: int = 0, lengths: tuple[int, ...] = (3, 5, 8, 12, 20, 40)
) -> list[str]:
    """Sentences of mixed word counts (so padding and bucketing matter)."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(words) for _ in range(rng.choice(lengths))).capitalize() + "." for _ in range(n)
    ]


def sentiment_bodies(items: list[str], n: int, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One body per text (n=1), or len(items) bodies of n consecutive texts (cyclic), so that every text is
    sent equally often."""
    if n == 1:
        return [{"text": t} | extra for t in items]
    return [
        {"texts": [items[(i + k) % len(items)] for k in range(n)]} | extra
        for i in range(0, len(items) * n, n)
    ]


def discover(root: Path, sentiment_model: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The bodies' extra fields: a sentiment model (`sentiment_model`, else sentiment-en, else the first) and
    a translation pair served from `root`."""
    sentiment: dict[str, Any] = {}
    translate: dict[str, Any] = {}
    for cfg_path in sorted(root.glob("*/config.json")):
        model = json.loads(cfg_path.read_text())["model"]
        name = cfg_path.parent.name
        if model["task"] == "sentiment" and (
            name == sentiment_model or (sentiment_model is None and (not sentiment or name == "sentiment-en"))
        ):
            sentiment = {"model": name}
        elif model["task"] == "translation" and (not translate or name == "translate-fr-en"):
            translate = {
                "model": name,
                "source_lang": model["source_langs"][0],
                "target_lang": model["target_langs"][0],
            }
    if sentiment_model is not None and not sentiment:
        raise SystemExit(f"no sentiment model {sentiment_model!r} under {root}")
    return sentiment, translate


def sentiment_lang(root: Path, sentiment: dict[str, Any]) -> str:
    """The model's first source language; without one, the name's suffix (sentiment-ko -> ko)."""
    langs = json.loads((root / sentiment["model"] / "config.json").read_text())["model"]["source_langs"]
    return langs[0] if langs else sentiment["model"].rsplit("-", 1)[-1]


def sentiment_texts(root: Path, sentiment: dict[str, Any]) -> list[str]:
    """The /sentiment inputs, in the model's language (the same for the server and the ceiling)."""
    return texts(WORDS.get(sentiment_lang(root, sentiment), EN_WORDS)) if sentiment else []


def process_cpu_s(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of a process and all its threads, or of one of its threads (Linux /proc; NaN
    elsewhere)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def children_cpu_s() -> float:
    """CPU seconds of waited-for child processes (the finished wrk runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@contextmanager
def serve(checkpoint_dir: Path, env: dict[str, str]) -> Iterator[tuple[str, float, int]]:
    """`python -m app` in a subprocess -> (base url, seconds from spawn to /ready 200, pid); SIGTERM at exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    base = {"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning"}
    with tempfile.TemporaryFile() as log:

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "app"], env=server_env(base | env), cwd=REPO, stdout=log, stderr=log
        )
        try:
            wait_ready(proc, url, 120, output)
            yield url, time.monotonic() - start, proc.pid
        finally:
            stop(proc, timeout=30)


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q / 100 * len(sorted_ms)))]


async def httpx_load(
    url: str, bodies: list[dict[str, Any]], concurrency: int, duration: float
) -> tuple[float, list[float], int]:
    """`concurrency` closed-loop clients for `duration` s -> (req/s, sorted latencies in ms, errors)."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await client.post(url, json=bodies[0])  # connect + warm
        end = time.perf_counter() + duration

        async def worker(k: int) -> None:
            nonlocal errors
            i = k
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                r = await client.post(url, json=bodies[i % len(bodies)])
                latencies.append((time.perf_counter() - t0) * 1000)
                errors += r.status_code != 200
                i += concurrency

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, sorted(latencies), errors


def wrk_load(
    url: str, bodies: list[dict[str, Any]], concurrency: int, duration: float
) -> tuple[float, float, float, float, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(json.dumps(b, ensure_ascii=False) for b in bodies) + "\n")
    try:
        cmd = [
            "wrk",
            f"-t{min(2, concurrency)}",
            f"-c{concurrency}",
            f"-d{max(1, round(duration))}s",
            "--timeout",
            "60s",  # wrk's default 2 s would drop slow (unbatched /translate) requests from the latencies
            "-s",
            str(WRK_SCRIPT),
            url,
            "--",
            f.name,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration + 60).stdout
    finally:
        os.unlink(f.name)
    res = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    return (
        res["requests"] / res["seconds"],
        res["p50_us"] / 1e3,
        res["p95_us"] / 1e3,
        res["p99_us"] / 1e3,
        res["errors"],
    )


def measure(
    url: str,
    route: str,
    mode: str,
    bodies: list[dict[str, Any]],
    c: int,
    duration: float,
    use_wrk: bool,
    server_pid: int,
) -> Cell:
    server0, wrk0, own0 = process_cpu_s(server_pid), children_cpu_s(), time.process_time()
    loop0 = process_cpu_s(server_pid, server_pid)  # the main thread (its tid is the pid) runs the event loop
    if use_wrk:
        rps, p50, p95, p99, errors = wrk_load(url, bodies, c, duration)
        cell = Cell(route, mode, c, rps, p50, p95, p99, errors, "wrk")
        client_s = children_cpu_s() - wrk0
    else:
        rps, lat, errors = asyncio.run(httpx_load(url, bodies, c, duration))
        cell = Cell(
            route,
            mode,
            c,
            rps,
            percentile(lat, 50),
            percentile(lat, 95),
            percentile(lat, 99),
            errors,
            "httpx",
        )
        client_s = time.process_time() - own0
    requests = max(1.0, rps * duration)
    cell.server_cpu_ms = 1000 * (process_cpu_s(server_pid) - server0) / requests
    cell.loop_cpu_ms = 1000 * (process_cpu_s(server_pid, server_pid) - loop0) / requests
    cell.client_cpu_ms = 1000 * client_s / requests
    return cell


def ceiling(
    checkpoint_dir: Path,
    sentiment: dict[str, Any],
    translate: dict[str, Any],
    beam_size: int,
    settings: dict[str, str] | None = None,
) -> dict[str, tuple[float, float]]:
    """(texts/s, CPU ms per text) of model.inference alone on the same inputs, batches of 32, on the CPU
    with torch's default threads (all cores: the best model-only figure) and, for classifiers, the compiled
    graph the server runs (APP_TORCHSCRIPT); classifiers: the best of 20 runs. Input work (tokenizing,
    hashing n-grams) is left out: the server does it too, it is not the model's. Models load in the
    server's dtype (`settings`: the --set APP_* values, e.g. APP_DTYPE=bfloat16)."""
    import torch

    from model import DecodeOptions, SentimentClassifier, load_checkpoint
    from model.inference import classify_ids, compile_classifier, translate_ids
    from model.ngram import NgramSpec, bags
    from model.preprocess import classifier_ids, source_ids

    dtype = server_settings(settings or {}).torch_dtype(torch.device("cpu"))
    out = {}
    if sentiment:
        sm = m = load_checkpoint(checkpoint_dir / sentiment["model"], dtype=dtype)  # sm: for server_work too
        model: SentimentClassifier = m.model  # type: ignore[assignment]
        inputs = sentiment_texts(checkpoint_dir, sentiment)
        seqs = [classifier_ids(m.tokenizer, t, m.config) for t in inputs]
        # an n-gram head's hashing is input work like tokenizing (the server's, not the model's): hashed
        # here, before the clock; the encoder and the head's forward on the bags are timed together
        encoder, head = model.encoder_only(), model.ngram
        graph = compile_classifier(encoder)
        spec = NgramSpec.parse(m.config.ngram) if m.config.ngram else None

        def run(batches: list[range]) -> Callable[[], None]:
            hashed = [
                bags([inputs[i] for i in b], spec, m.config.ngram_buckets) if spec else None for b in batches
            ]

            def forward() -> None:
                for b, bag in zip(batches, hashed, strict=True):
                    classify_ids(encoder, [seqs[i] for i in b], 32, graph)
                    if head is not None and bag is not None:
                        head(*bag)

            return forward

        with torch.inference_mode():
            wall, cpu = best_of(run([range(len(seqs))]))  # sorted by length over all texts, cut into 32s
            out["/sentiment"] = (len(seqs) / wall, 1000 * cpu / len(seqs))
            # the same in arrival order, 32 at a time: what a server's batches of 32 can do without HTTP
            # (the ceiling above sorts all texts first, so its batches carry almost no padding)
            wall, cpu = best_of(run([range(i, min(i + 32, len(seqs))) for i in range(0, len(seqs), 32)]))
            out[ARRIVAL] = (len(seqs) / wall, 1000 * cpu / len(seqs))
    if translate:
        m = load_checkpoint(checkpoint_dir / translate["model"], dtype=dtype)
        seqs = [source_ids(m.tokenizer, t, m.config) for t in texts(FR_WORDS, lengths=SENTENCE_WORDS)[:64]]
        opts = DecodeOptions(beam_size=beam_size)
        start, cpu = time.perf_counter(), time.process_time()
        translate_ids(m.model, seqs, opts, translate["target_lang"], 32)  # type: ignore[arg-type]
        out["/translate"] = (
            len(seqs) / (time.perf_counter() - start),
            1000 * (time.process_time() - cpu) / len(seqs),
        )
    if sentiment:  # last: its worker threads set their own intra-op thread count
        out[WORKERS] = server_work(sm, inputs, settings or {})
    order = ["/sentiment", ARRIVAL, WORKERS, "/translate"]  # the /sentiment references together
    return {k: out[k] for k in order if k in out}


def server_work(loaded: LoadedModel, inputs: list[str], settings: dict[str, str]) -> tuple[float, float]:
    """(texts/s, CPU ms per text) of the server's inference path without HTTP: as many threads as the
    server's inference workers, with its intra-op threads each (`settings`: the --set APP_* values over the
    defaults; on 2 CPU cores, 2 workers of 1 thread), run app.handlers.SentimentHandler.run (one compiled
    graph for the encoder and the n-gram hashing and head, then the output lists) on the inputs in arrival order, 32 at a time,
    one batch per worker side by side; best of 5 runs of every batch on every worker."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from app.handlers import SentimentHandler

    s = server_settings(settings)
    workers, threads = s.inference_workers_count(), s.inference_threads()
    handler = SentimentHandler(loaded, s.torchscript)  # its own compiled graph: the server's exact path
    items = [handler.tokenize(t) for t in inputs]
    batches = [items[i : i + s.max_batch_size] for i in range(0, len(items), s.max_batch_size)]
    with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(threads,)) as pool:

        def run() -> None:
            for _ in pool.map(handler.run, batches * workers):  # every batch once per worker's share
                pass

        wall, cpu = best_of(run, runs=5)
    return len(items) * workers / wall, 1000 * cpu / (len(items) * workers)


def server_settings(settings: dict[str, str]) -> Settings:
    """The server's Settings with the --set APP_* values over the defaults."""
    from app.settings import Settings

    return Settings(**{k.removeprefix("APP_").lower(): v for k, v in settings.items()})


def best_of(fn: Any, runs: int = 20) -> tuple[float, float]:
    """(wall s, CPU s) of the fastest of `runs` calls after one warm-up call."""
    fn()
    best = (float("inf"), float("inf"))
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - start, time.process_time() - cpu))
    return best


def report(
    cells: list[Cell],
    ready: dict[str, float],
    ceil: dict[str, tuple[float, float]],
    short_p50: float,
    conc: list[int],
) -> str:
    lines = [
        "| route | batching | concurrency | req/s | texts/s | p50 ms | p95 ms | p99 ms | errors | client | server CPU ms/req | of which event loop | client CPU ms/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for c in cells:
        lines.append(
            f"| {c.route} | {c.mode} | {c.concurrency} | {c.rps:.1f} | {c.rps * c.texts:.1f} | {c.p50:.1f}"
            f" | {c.p95:.1f} | {c.p99:.1f}"
            f" | {c.errors} | {c.client} | {c.server_cpu_ms:.2f} | {c.loop_cpu_ms:.2f} | {c.client_cpu_ms:.2f} |"
        )
    lines += ["", "| route | in-process ceiling (texts/s, batches of 32) | CPU ms/text |", "|---|---:|---:|"]
    lines += [f"| {route} | {v:.1f} | {cpu:.2f} |" for route, (v, cpu) in ceil.items()]
    get = {(c.route, c.mode, c.concurrency): c.rps * c.texts for c in cells}  # texts/s
    top = max(conc)
    lines += ["", "| target | measured | met |", "|---|---:|---|"]
    on, off = get.get(("/sentiment", "on", top)), get.get(("/sentiment", "off", top))
    if on and off:
        lines.append(
            f"| /sentiment c={top}: batching on >= 4x off | {on / off:.2f}x | {'yes' if on / off >= 4 else 'no'} |"
        )
    for route, (v, _) in ceil.items():
        if (tps := get.get((route, "on", top))) is not None:
            lines.append(
                f"| {route} c={top} HTTP >= 60% of ceiling (texts/s) | {100 * tps / v:.0f}% | {'yes' if tps >= 0.6 * v else 'no'} |"
            )
    if (tps := get.get(("/sentiment", "on", top))) is not None:
        for name, what in ((ARRIVAL, "the arrival-order ceiling"), (WORKERS, "the server's model work")):
            if name in ceil:
                lines.append(
                    f"| (for reference) /sentiment c={top} HTTP vs {what} | {100 * tps / ceil[name][0]:.0f}% | |"
                )
        if WORKERS in ceil and "/sentiment" in ceil:
            lines.append(
                f"| (for reference) the server's model work vs the ceiling, no HTTP | {100 * ceil[WORKERS][0] / ceil['/sentiment'][0]:.0f}% | |"
            )
    lines.append(
        f"| single short /sentiment p50 <= 10 ms | {short_p50:.1f} ms | {'yes' if short_p50 <= 10 else 'no'} |"
    )
    for mode, s in ready.items():
        lines.append(
            f"| ready within 5 s of start (batching {mode}) | {s:.1f} s | {'yes' if s <= 5 else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument(
        "--routes", nargs="+", default=["/sentiment", "/translate"], choices=["/sentiment", "/translate"]
    )
    p.add_argument(
        "--sentiment-model",
        metavar="NAME",
        help="the /sentiment model (default: sentiment-en); inputs in its language (Korean for sentiment-ko)",
    )
    p.add_argument("--beam-size", type=int, default=4, help="/translate beam size (the API default is 4)")
    p.add_argument(
        "--texts-per-request",
        type=int,
        default=1,
        metavar="N",
        help='/sentiment bodies carry N texts ({"texts": [...]}); the targets compare texts/s',
    )
    p.add_argument(
        "--wrk", choices=["auto", "yes", "no"], default="auto", help="use wrk as the load generator"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="APP_NAME=VALUE", help="a server setting (both servers)"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="whole passes; the tables report medians (VM noise)",
    )
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.texts_per_request < 1:
        p.error(f"--texts-per-request must be at least 1, got {args.texts_per_request}")
    extra = dict(kv.split("=", 1) for kv in args.set)
    if bad := [k for k in extra if not k.startswith("APP_")]:
        p.error(f"--set takes APP_* settings, got {bad}")
    sentiment, translate = discover(args.checkpoint_dir, args.sentiment_model)
    use_wrk = args.wrk == "yes" or (args.wrk == "auto" and shutil.which("wrk") is not None)
    bodies = {
        "/sentiment": sentiment_bodies(
            sentiment_texts(args.checkpoint_dir, sentiment), args.texts_per_request, sentiment
        ),
        "/translate": [
            {"text": t, "beam_size": args.beam_size} | translate
            for t in texts(FR_WORDS, lengths=SENTENCE_WORDS)
        ]
        if translate
        else [],
    }
    routes = [r for r in args.routes if bodies[r]]
    passes = []
    for k in range(args.repeats):  # whole passes, so slow and fast spells of a shared VM hit every cell
        if args.repeats > 1:
            print(f"pass {k + 1} of {args.repeats}", file=sys.stderr)
        passes.append(one_pass(args, extra, sentiment, translate, bodies, routes, use_wrk))
    cells, ready, ceil, short_p50 = median_pass(passes)
    import torch

    dtype = str(server_settings(extra).torch_dtype(torch.device("cpu"))).removeprefix("torch.")
    print(f"server and ceiling dtype: {dtype}")
    if sentiment and "/sentiment" in routes:
        print(f"/sentiment model: {sentiment['model']}")
    print()
    print(report(cells, ready, ceil, short_p50, args.concurrency))
    if args.repeats > 1:
        print(f"\nMedians of {args.repeats} passes (each cell: the pass with the median req/s). Per pass:\n")
        print(spread(passes, max(args.concurrency)))
    return 0


Pass = tuple[list[Cell], dict[str, float], dict[str, tuple[float, float]], float]


def one_pass(
    args: argparse.Namespace,
    extra: dict[str, str],
    sentiment: dict[str, Any],
    translate: dict[str, Any],
    bodies: dict[str, list[dict[str, Any]]],
    routes: list[str],
    use_wrk: bool,
) -> Pass:
    """Every cell once (a server with batching on, then off), then the model-only ceiling."""
    cells: list[Cell] = []
    ready: dict[str, float] = {}
    short_p50 = float("nan")
    for mode, env in (("on", {}), ("off", {"APP_MAX_BATCH_SIZE": "1"})):
        with serve(args.checkpoint_dir, extra | env) as (url, ready[mode], pid):
            print(f"server (batching {mode}) ready in {ready[mode]:.1f} s", file=sys.stderr)
            if mode == "on" and sentiment:
                _, lat, _ = asyncio.run(
                    httpx_load(
                        f"{url}/sentiment",
                        [
                            {
                                "text": SHORT_TEXTS.get(
                                    sentiment_lang(args.checkpoint_dir, sentiment), SHORT_TEXTS["en"]
                                )
                            }
                            | sentiment
                        ],
                        1,
                        min(3.0, args.duration),
                    )
                )
                short_p50 = statistics.median(lat)
            for route in routes:
                for c in args.concurrency:
                    cells.append(
                        measure(f"{url}{route}", route, mode, bodies[route], c, args.duration, use_wrk, pid)
                    )
                    cells[-1].texts = args.texts_per_request if route == "/sentiment" else 1
                    print(f"  {route} c={c}: {cells[-1].rps:.1f} req/s", file=sys.stderr)
    ceil = ceiling(
        args.checkpoint_dir,
        sentiment if "/sentiment" in routes else {},
        translate if "/translate" in routes else {},
        args.beam_size,
        extra,
    )
    return cells, ready, ceil, short_p50


def median_pass(passes: list[Pass]) -> Pass:
    """Per cell the pass with the median req/s (its latencies with it); medians of the other figures."""
    cells = []
    for i in range(len(passes[0][0])):
        ranked = sorted((p[0][i] for p in passes), key=lambda c: c.rps)
        cells.append(ranked[(len(ranked) - 1) // 2])
    ready = {m: statistics.median(p[1][m] for p in passes) for m in passes[0][1]}
    ceil = {
        r: (statistics.median(p[2][r][0] for p in passes), statistics.median(p[2][r][1] for p in passes))
        for r in passes[0][2]
    }
    return cells, ready, ceil, statistics.median(p[3] for p in passes)


def spread(passes: list[Pass], top: int) -> str:
    """One row per pass: the /sentiment figures the targets compare."""
    lines = [
        f"| pass | /sentiment on c={top} | off c={top} | on/off | ceiling | % of ceiling | arrival-order ceiling"
        " | % of it | server's model work | % of it |"
    ]
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    nan = (float("nan"),)
    for k, (cells, _, ceil, _) in enumerate(passes, 1):
        get = {(c.route, c.mode, c.concurrency): c.rps * c.texts for c in cells}
        on, off = get.get(("/sentiment", "on", top)), get.get(("/sentiment", "off", top))
        if on is None or off is None or "/sentiment" not in ceil:
            continue
        v, arrival, work = ceil["/sentiment"][0], ceil.get(ARRIVAL, nan)[0], ceil.get(WORKERS, nan)[0]
        lines.append(
            f"| {k} | {on:.0f} | {off:.0f} | {on / off:.2f}x | {v:.0f} | {100 * on / v:.0f}% | {arrival:.0f}"
            f" | {100 * on / arrival:.0f}% | {work:.0f} | {100 * on / work:.0f}% |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

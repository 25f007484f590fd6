"""What the load benchmark sends and how: the request bodies, the load generators (wrk, or an httpx client),
and one measured cell (throughput, latency percentiles, CPU per request of the server and of the client)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

WRK_SCRIPT = Path(__file__).resolve().parent / "wrk" / "post.lua"
SHORT_TEXTS = {"en": "A wonderful film.", "ko": "정말 재미있는 영화."}  # the single short /sentiment request
EN_WORDS = [
    "the", "film", "story", "acting", "music", "was", "very", "quite", "not", "really", "good", "bad", "boring",
    "wonderful", "great", "awful", "plot", "ending",
]  # fmt: skip
FR_WORDS = [
    "le", "chat", "chien", "film", "livre", "maison", "aime", "voit", "lit", "trouve", "très", "bon", "beau",
    "petit", "grand", "avec", "la", "une", "un",
]  # fmt: skip
KO_WORDS = [  # for a Korean sentiment model (sentiment-ko): review vocabulary, as NSMC
    "영화", "정말", "재미있다", "최고", "별로", "지루하다", "배우", "연기", "스토리", "너무", "좋다", "나쁘다", "감동",
    "시간", "아깝다", "음악", "결말", "완전",
]  # fmt: skip
SENTENCE_WORDS = (3, 5, 8, 12, 20)  # translation inputs: sentence-sized, like the Tatoeba test set
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


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q / 100 * len(sorted_ms)))]


async def httpx_load(
    url: str, bodies: list[dict[str, Any]], concurrency: int, duration: float, *, form: bool = False
) -> tuple[float, list[float], int]:
    """`concurrency` closed-loop clients for `duration` s -> (req/s, sorted latencies in ms, errors); the
    bodies go as JSON, or as urlencoded forms with `form`."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        kind = "data" if form else "json"
        await client.post(url, **{kind: bodies[0]})  # connect + warm
        end = time.perf_counter() + duration

        async def worker(k: int) -> None:
            nonlocal errors
            i = k
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                r = await client.post(url, **{kind: bodies[i % len(bodies)]})
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

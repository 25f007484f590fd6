"""Heavy requests beside cheap sentiment clients (issue 20 §2): does a cheap model keep its latency?

Starts the server (bench/server.py), runs N closed-loop /sentiment clients alone (unloaded), then the same
clients beside H clients looping on the heavy /translate (64 texts x 16 sentences, beam 16) and P clients
looping on /attention PNGs. Prints the /sentiment throughput and p50/p99 of both phases, the heavy and PNG
requests' outcomes by status, and from /metrics the items computed after their request had left
(abandoned_items_total) and the items whose decoding stopped early (stopped_items_total).

    python -m bench.heavy_mix --sentiment-clients 64 --heavy-clients 2 --seconds 60
    python -m bench.heavy_mix --sentiment-clients 64 --heavy-clients 0 --png-clients 4 --seconds 60
    python -m bench.heavy_mix --env APP_MAX_WORK=1000000 --env APP_MAX_QUEUE_WORK=4000000  # heavy admitted
    python -m bench.heavy_mix --url http://127.0.0.1:8000  # a server already running (e.g. another checkout)
    # issue 29: four clients on the heaviest translation the default budget admits (45 sentences of ~27 tokens)
    python -m bench.heavy_mix --heavy-clients 4 --heavy-texts 45 --heavy-sentences 1 --heavy-words 22-26
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import httpx

from app.core.metrics import NAMESPACE
from bench.load import FR_WORDS, SHORT_TEXTS, percentile, wrk_load
from bench.server import REPO, serve

HEAVY_TEXTS, HEAVY_SENTENCES, HEAVY_BEAM = 64, 16, 16
Phase = tuple[int, int, float, float]  # requests, errors, p50 ms, p99 ms
PNG_BODY = {
    "model": "sentiment-en",
    "text": "A wonderful film, with great acting and music.",
    "format": "png",
}


def heavy_body(
    seed: int = 0,
    texts_n: int = HEAVY_TEXTS,
    sentences: int = HEAVY_SENTENCES,
    words: tuple[int, int] = (4, 9),
) -> dict[str, object]:
    """`texts_n` texts of `sentences` French sentences (`words` words each, a range), beam 16."""
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choice(FR_WORDS) for _ in range(rng.randint(*words))).capitalize() + "."

    texts = [" ".join(sentence() for _ in range(sentences)) for _ in range(texts_n)]
    return {"texts": texts, "source_lang": "fr", "beam_size": HEAVY_BEAM}


def counters(metrics_text: str, name: str) -> float | None:
    """The sum of a counter over its models, named with or without the server's namespace (None when the
    server has no such metric)."""
    for full in (f"{NAMESPACE}_{name}", name):
        if f"# TYPE {full} counter" in metrics_text:
            values = re.findall(rf"^{full}{{[^}}]*}} (\S+)$", metrics_text, re.MULTILINE)
            return sum(float(v) for v in values)
    return None


async def sentiment_clients(url: str, clients: int, seconds: float) -> tuple[list[float], int]:
    """Closed-loop /sentiment clients for `seconds` -> (sorted latencies in ms, non-200 answers)."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        return await sentiment_loops(client, clients, stop)


async def sentiment_loops(
    client: httpx.AsyncClient, clients: int, stop: asyncio.Event
) -> tuple[list[float], int]:
    """`clients` closed loops of one short /sentiment request until `stop` is set -> (sorted latencies in
    ms, non-200 answers)."""
    latencies: list[float] = []
    errors = 0

    async def loop() -> None:
        nonlocal errors
        while not stop.is_set():
            t0 = time.perf_counter()
            r = await client.post("/sentiment", json={"text": SHORT_TEXTS["en"]})
            latencies.append((time.perf_counter() - t0) * 1000)
            errors += r.status_code != 200

    await asyncio.gather(*(loop() for _ in range(clients)))
    return sorted(latencies), errors


async def looping_clients(
    url: str, path: str, body: dict[str, object], clients: int, seconds: float, timeout: float
) -> Counter[str]:
    """Clients looping on one request -> outcomes by status ("timeout": the client gave up and left)."""
    outcomes: Counter[str] = Counter()
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        end = time.perf_counter() + seconds

        async def loop() -> None:
            while time.perf_counter() < end:
                try:
                    r = await client.post(path, json=body)
                    outcomes[str(r.status_code)] += 1
                except httpx.TimeoutException:
                    outcomes["timeout"] += 1

        await asyncio.gather(*(loop() for _ in range(clients)))
    return outcomes


async def sentiment_load(url: str, clients: int, seconds: float, use_wrk: bool) -> Phase:
    """The /sentiment clients' (requests, errors, p50 ms, p99 ms): wrk (in its own process, so the client
    is not the bottleneck) or the httpx clients above."""
    if use_wrk:
        body = {"text": SHORT_TEXTS["en"]}
        rps, p50, _, p99, errors = await asyncio.to_thread(
            wrk_load, f"{url}/sentiment", [body], clients, seconds
        )
        return round(rps * seconds), errors, p50, p99
    lat, errors = await sentiment_clients(url, clients, seconds)
    return len(lat), errors, percentile(lat, 50), percentile(lat, 99)


async def run(url: str, args: argparse.Namespace) -> None:
    async with httpx.AsyncClient(base_url=url) as c:
        for _ in range(20):  # warm
            await c.post("/sentiment", json={"text": SHORT_TEXTS["en"]})
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk") is not None)
    print(f"/sentiment load: {'wrk' if use_wrk else 'httpx'}, {args.sentiment_clients} connections")
    unloaded = await sentiment_load(url, args.sentiment_clients, args.seconds / 2, use_wrk)
    before = httpx.get(f"{url}/metrics").text
    loaded, heavy, png = await asyncio.gather(
        sentiment_load(url, args.sentiment_clients, args.seconds, use_wrk),
        looping_clients(
            url,
            "/translate",
            heavy_body(0, args.heavy_texts, args.heavy_sentences, words(args.heavy_words)),
            args.heavy_clients,
            args.seconds,
            args.heavy_timeout,
        ),
        looping_clients(url, "/attention", PNG_BODY, args.png_clients, args.seconds, args.heavy_timeout),
    )
    await asyncio.sleep(args.heavy_timeout)  # let abandoned batches end before reading the counters
    after = httpx.get(f"{url}/metrics").text
    print(f"{'phase':<10} {'requests':>9} {'req/s':>7} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for phase, (n, err, p50, p99), secs in (
        ("unloaded", unloaded, args.seconds / 2),
        ("loaded", loaded, args.seconds),
    ):
        print(f"{phase:<10} {n:>9} {n / secs:>7.0f} {err:>7} {p50:>8.1f} {p99:>8.1f}")
    print(f"p99 loaded / unloaded: {loaded[3] / unloaded[3]:.1f}x")
    print("heavy /translate outcomes:", dict(sorted(heavy.items())))
    print("/attention PNG outcomes:", dict(sorted(png.items())))
    for name in ("abandoned_items_total", "stopped_items_total"):
        a, b = counters(before, name), counters(after, name)
        print(f"{name}: {'n/a (not exported)' if a is None or b is None else f'{b - a:g}'}")


def words(span: str) -> tuple[int, int]:
    low, _, high = span.partition("-")
    return int(low), int(high or low)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    p.add_argument("--sentiment-clients", type=int, default=64)
    p.add_argument("--heavy-clients", type=int, default=2)
    p.add_argument("--png-clients", type=int, default=0, help="clients looping on /attention PNGs")
    p.add_argument("--heavy-texts", type=int, default=HEAVY_TEXTS, help="texts per heavy request")
    p.add_argument("--heavy-sentences", type=int, default=HEAVY_SENTENCES, help="sentences per heavy text")
    p.add_argument("--heavy-words", default="4-9", help="words per heavy sentence: MIN-MAX")
    p.add_argument("--seconds", type=float, default=60.0, help="loaded phase; the unloaded one is half")
    p.add_argument("--heavy-timeout", type=float, default=35.0, help="client timeout of a heavy request")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE server settings, repeatable")
    p.add_argument("--client", choices=("auto", "wrk", "httpx"), default="auto", help="the /sentiment load")
    p.add_argument("--url", help="measure this running server instead of starting one (--env is ignored)")
    args = p.parse_args(argv)
    if args.url:
        print(f"server {args.url}")
        asyncio.run(run(args.url.rstrip("/"), args))
        return 0
    env = dict(kv.split("=", 1) for kv in args.env)
    with serve(args.checkpoint_dir, env) as (url, _, _):
        print(f"server {url} with {env or 'default settings'}")
        asyncio.run(run(url, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

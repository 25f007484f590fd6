"""LibreTranslate clients batched together: closed-loop clients, each sending LibreTranslate form requests
(one sentence, as libretranslatepy sends them) to /libretranslate/translate, against the server decoding each
request alone (APP_MAX_BATCH_SIZE=1, as LibreTranslate does) and with its cross-request batching (the
default) -> requests/s, latency percentiles, mean batch size.

    python -m bench.libretranslate [--checkpoint-dir checkpoints] [--concurrency 16] [--duration 20]
                                   [--set APP_NAME=VALUE]
"""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path
from typing import Any

import httpx

from bench.load import FR_WORDS, httpx_load, percentile, texts
from bench.server import REPO, serve_many

MODES = {"one request per forward pass": {"APP_MAX_BATCH_SIZE": "1"}, "batched (default)": {}}


async def load(url: str, bodies: list[dict[str, str]], concurrency: int, duration: float) -> dict[str, Any]:
    """`concurrency` clients posting forms for `duration` s -> req/s, p50/p95 ms, errors, mean batch size."""
    rps, latencies, errors = await httpx_load(
        f"{url}/libretranslate/translate", bodies, concurrency, duration, form=True
    )
    async with httpx.AsyncClient(base_url=url) as client:
        metrics = (await client.get("/metrics")).text
    return {
        "rps": rps,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "errors": errors,
        "batch": mean_batch_size(metrics),
    }


def mean_batch_size(metrics: str) -> float:
    """Items per forward pass over every translation model (the batch_size histogram's sum / count)."""
    sums = re.findall(r'batch_size_sum\{model="translate-[^"]*"\} (\S+)', metrics)
    counts = re.findall(r'batch_size_count\{model="translate-[^"]*"\} (\S+)', metrics)
    count = sum(map(float, counts))
    return sum(map(float, sums)) / count if count else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    ap.add_argument("--source", default="fr", help="the pair's source language (target: en)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per mode")
    ap.add_argument(
        "--set", action="append", default=[], metavar="APP_NAME=VALUE", help="a server setting (both servers)"
    )
    args = ap.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in args.set)
    if bad := [k for k in extra if not k.startswith("APP_")]:
        ap.error(f"--set takes APP_* settings, got {bad}")
    bodies = [{"q": t, "source": args.source, "target": "en"} for t in texts(FR_WORDS, lengths=(3, 5, 8, 12))]
    # both servers start side by side (no start time is reported here); each is measured while the other idles
    envs = [extra | env | {"APP_LOG_LEVEL": "warning"} for env in MODES.values()]
    with serve_many(args.checkpoint_dir, envs, side_by_side=True) as servers:
        rows = [
            (mode, asyncio.run(load(url, bodies, args.concurrency, args.duration)))
            for mode, (url, _, _) in zip(MODES, servers, strict=True)
        ]
    print(f"{args.concurrency} LibreTranslate clients, form bodies, one {args.source}->en sentence each:\n")
    print("| server | req/s | p50 ms | p95 ms | sentences per forward | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, c in rows:
        print(
            f"| {mode} | {c['rps']:.1f} | {c['p50']:.0f} | {c['p95']:.0f} | {c['batch']:.1f} | {c['errors']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Load test of the HTTP server against the in-process model-only ceiling, printed as markdown tables.

  python -m bench.serve_load [--checkpoint-dir checkpoints] [--duration 5] [--concurrency 1 8 64] [--wrk auto]
                             [--repeats 3] [--sentiment-model sentiment-ko] [--engine ctranslate2]
                             [--ceiling-runs N]

Starts `python -m app` itself on a free 127.0.0.1 port, twice: batching on (the default settings) and off
(APP_MAX_BATCH_SIZE=1), one after the other (each ready time is a server's start alone), and keeps both for
every pass (the one not measured sits idle). For /sentiment and /translate at each concurrency it reports
throughput and p50/p95/p99 latency, one text per request (`--texts-per-request N` for /sentiment), with `wrk`
(bench/wrk/post.lua) when installed: a Python client tops out near 150 req/s on 2 cores and takes CPU from
the server (`--wrk no` falls back to an httpx async client). The ceiling runs model.inference directly on the
same inputs in batches of 32. /sentiment inputs are in the model's language: English for sentiment-en (the
default), Korean for `--sentiment-model sentiment-ko`. `--engine torch|ctranslate2` serves (and measures the
/translate ceiling) with that APP_TRANSLATION_ENGINE.

The pieces: bench/server.py starts the server, bench/load.py makes the inputs and the load and measures a
cell, bench/ceilings.py the model-only figures, bench/report.py prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.ceilings import ceiling, server_settings
from bench.load import (
    FR_WORDS,
    SENTENCE_WORDS,
    SHORT_TEXTS,
    Cell,
    discover,
    httpx_load,
    measure,
    sentiment_bodies,
    sentiment_lang,
    sentiment_texts,
    texts,
)
from bench.report import Pass, median_pass, report, spread
from bench.server import REPO, serve_many

# each server's own settings: batching on (the defaults) and off
MODES: dict[str, dict[str, str]] = {"on": {}, "off": {"APP_MAX_BATCH_SIZE": "1"}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    discover(args.checkpoint_dir, args.sentiment_model)  # an unknown model fails before any server starts
    # one after the other (each ready time is a server's start alone), both kept for every pass
    with serve_many(args.checkpoint_dir, list(server_envs(args).values())) as started:
        return run(args, dict(zip(MODES, started, strict=True)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, and in `settings` the servers' APP_* values that they set (--set, --engine)."""
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
        "--engine",
        choices=["auto", "torch", "ctranslate2"],
        help="the servers' (and the /translate ceiling's) APP_TRANSLATION_ENGINE (default: the server's, auto)",
    )
    p.add_argument(
        "--ceiling-runs",
        type=int,
        metavar="N",
        help="best of N timed runs for every model-only ceiling (default: 20; translators 3, server work 5)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="whole passes over the same two servers; the tables report medians (VM noise)",
    )
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.ceiling_runs is not None and args.ceiling_runs < 1:
        p.error(f"--ceiling-runs must be at least 1, got {args.ceiling_runs}")
    if args.texts_per_request < 1:
        p.error(f"--texts-per-request must be at least 1, got {args.texts_per_request}")
    args.settings = dict(kv.split("=", 1) for kv in args.set)
    if bad := [k for k in args.settings if not k.startswith("APP_")]:
        p.error(f"--set takes APP_* settings, got {bad}")
    if args.engine:
        args.settings["APP_TRANSLATION_ENGINE"] = args.engine
    return args


def server_envs(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """Each mode's server settings: the options' (args.settings), then the mode's own."""
    return {mode: args.settings | env for mode, env in MODES.items()}


def run(args: argparse.Namespace, servers: dict[str, tuple[str, float, int]]) -> int:
    """The passes and the tables, on `servers` started with server_envs(args): mode -> (url, ready s, pid)."""
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
    for mode, (_, ready_s, _) in servers.items():
        print(f"server (batching {mode}) ready in {ready_s:.1f} s", file=sys.stderr)
    for k in range(args.repeats):  # whole passes, so slow and fast spells of a shared VM hit every cell
        if args.repeats > 1:
            print(f"pass {k + 1} of {args.repeats}", file=sys.stderr)
        passes.append(one_pass(args, servers, sentiment, translate, bodies, routes, use_wrk))
    cells, ready, ceil, short_p50 = median_pass(passes)
    import torch

    dtype = str(server_settings(args.settings).torch_dtype(torch.device("cpu"))).removeprefix("torch.")
    print(f"server and ceiling dtype: {dtype}")
    if "/translate" in routes:
        server = server_settings(args.settings)
        engine = "ctranslate2" if server.ctranslate2_kwargs(torch.device("cpu"), torch.float32) else "torch"
        print(f"/translate engine: {engine} (APP_TRANSLATION_ENGINE={server.translation_engine})")
    if sentiment and "/sentiment" in routes:
        print(f"/sentiment model: {sentiment['model']}")
    print()
    print(report(cells, ready, ceil, short_p50, args.concurrency))
    if args.repeats > 1:
        print(f"\nMedians of {args.repeats} passes (each cell: the pass with the median req/s). Per pass:\n")
        print(spread(passes, max(args.concurrency)))
    return 0


def one_pass(
    args: argparse.Namespace,
    servers: dict[str, tuple[str, float, int]],
    sentiment: dict[str, Any],
    translate: dict[str, Any],
    bodies: dict[str, list[dict[str, Any]]],
    routes: list[str],
    use_wrk: bool,
) -> Pass:
    """Every cell once (`servers`: batching on, then off -> (url, ready s, pid)), then the model-only
    ceiling."""
    cells: list[Cell] = []
    short_p50 = float("nan")
    for mode, (url, _, pid) in servers.items():
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
        args.settings,
        args.ceiling_runs,
    )
    return cells, {mode: ready_s for mode, (_, ready_s, _) in servers.items()}, ceil, short_p50


if __name__ == "__main__":
    sys.exit(main())

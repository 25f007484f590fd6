"""This checkout against another, paired (issue 46): each one's `python -m app` (its defaults, or --env's
settings) started once, on the same checkpoints, then loaded in turn, round after round with the order
alternating: /sentiment with one short text a request at 64 connections and with 64 texts a request at 16
(bench.scale's texts, bench/blast.py clients). A ratio per round and route (this checkout over the other),
so that the machine's drift over a run (10-15% on these VMs) cancels out; then the medians.

    python -m bench.paired /path/to/main/checkout [--rounds 6] [--duration 5] [--env "APP_X=1 APP_Y=2"]
"""

from __future__ import annotations

import argparse
import statistics
from contextlib import ExitStack
from pathlib import Path

from bench.blast import blast, requests
from bench.load import sentiment_bodies
from bench.machine import describe
from bench.scale import SENTIMENT_MODEL, bodies, env_rows
from bench.server import REPO, serve_many

LOADS = {"1 text": (1, 64), "64 texts": (64, 16)}  # texts a request, connections


def table(rates: dict[tuple[str, str], list[float]]) -> list[str]:
    """The markdown table of `rates` ((load, "this" or "baseline") -> texts/s a round): medians and the
    ratio of each round."""
    out = [
        "| /sentiment | connections | this (median texts/s) | baseline | ratio a round | median ratio |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for load, (_, conns) in LOADS.items():
        ours, theirs = rates[(load, "this")], rates[(load, "baseline")]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        shown = ", ".join(f"{x:.2f}" for x in ratios)
        out.append(
            f"| {load} | {conns} | {statistics.median(ours):,.0f} | {statistics.median(theirs):,.0f} | {shown} "
            f"| {statistics.median(ratios):.3f} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline", type=Path, help="the other checkout (e.g. a worktree of main)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--duration", type=float, default=5.0, help="seconds a load (after a 1 s warm-up)")
    p.add_argument("--clients", type=int, default=2, help="client processes")
    p.add_argument("--env", default="", help='settings for both: "APP_X=1 APP_Y=2"')
    p.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    args = p.parse_args(argv)
    env = env_rows([args.env])[0].env if args.env else {}
    texts = [b["text"] for b in bodies("/sentiment")]
    model = {"model": SENTIMENT_MODEL}
    trees = {"this": REPO, "baseline": args.baseline.resolve()}
    rates: dict[tuple[str, str], list[float]] = {}
    print(f"# {describe()}; {env or 'defaults'}")
    with ExitStack() as stack:
        urls = {}
        for name, tree in trees.items():
            [(url, _, _)] = stack.enter_context(serve_many(args.checkpoint_dir, [env], cwd=tree))
            urls[name] = url
        for r in range(args.rounds):
            for load, (n, conns) in LOADS.items():
                for name in list(trees)[:: 1 if r % 2 == 0 else -1]:
                    reqs = requests(f"{urls[name]}/sentiment", sentiment_bodies(texts, n, model))
                    out = blast([urls[name]], [reqs], conns, args.duration, args.clients)
                    rates.setdefault((load, name), []).append(out.rps * n)
                    print(f"round {r + 1}: {name} {load} {out.rps * n:,.0f} texts/s, {out.errors} errors")
    print("\n" + "\n".join(table(rates)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

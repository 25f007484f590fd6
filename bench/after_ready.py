"""What a server does in its first seconds after /ready, with translators' graphs built after ready (the
default, APP_TORCHSCRIPT_AFTER_READY=true) or before: a replica that joins under load gets its traffic the
moment it is ready.

    python -m bench.after_ready [--connections 32] [--duration 2] [--repeats 2]

Per setting and route, a fresh `python -m app` (the shipped checkpoints, the defaults otherwise) is loaded
from the moment /ready says 200 (not waiting for the graphs): a first window (after bench/blast.py's
one-second warm-up, which is not counted) and, right after it, a second one (again after a warm-up). One client process,
closed loop; medians over `--repeats` rounds (the settings alternate). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from statistics import median

import httpx

from bench.blast import blast, requests
from bench.server import REPO, free_port, server_env, stop, wait_ready

BODIES = {
    "/sentiment": [
        {"text": t} for t in ("a good film", "not bad at all", "the worst film of the year", "fine")
    ],
    "/translate": [
        {"text": t, "source_lang": "fr", "target_lang": "en", "beam_size": 4}
        for t in ("Le chat dort.", "Où est la gare ?", "Il fait beau aujourd'hui.")
    ],
}


def one(after: bool, route: str, connections: int, duration: float) -> dict[str, float | str]:
    """A fresh server under load from its /ready on -> ready s, each window's req/s and p99, the graphs' states
    after the first window."""
    port = free_port()
    env = server_env({"APP_PORT": str(port), "APP_LOG_LEVEL": "warning",
                      "APP_TORCHSCRIPT_AFTER_READY": str(after).lower()})  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "app"], env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        ready = wait_ready(proc, url, 180, graphs=False)
        reqs = [requests(url + route, BODIES[route])]
        first = blast([url], reqs, connections, duration, 1)
        states = {m.get("graphs") for m in httpx.get(f"{url}/models").json()["models"]}
        second = blast([url], reqs, connections, duration, 1)
    finally:
        stop(proc)
    return {
        "ready": ready, "rps1": first.rps, "p99_1": first.p99, "rps2": second.rps, "p99_2": second.p99,
        "graphs": ", ".join(sorted(str(s) for s in states)),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--duration", type=float, default=2.0, help="seconds per window (after a 1 s warm-up)")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}; {args.connections} connections", flush=True)
    runs: dict[tuple[bool, str], list[dict[str, float | str]]] = {}
    for _ in range(args.repeats):
        for route in BODIES:
            for after in (True, False):
                runs.setdefault((after, route), []).append(one(after, route, args.connections, args.duration))
    d = args.duration
    print(
        f"\n| translators' graphs | route | ready s | {1:g}-{1 + d:g} s after ready: req/s | p99 ms | "
        f"graphs then | {2 + d:g}-{2 + 2 * d:g} s: req/s | p99 ms |"
    )
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for (after, route), rows in runs.items():

        def med(key: str, rows: list[dict[str, float | str]] = rows) -> float:
            return median(float(r[key]) for r in rows)

        graphs = "; ".join(sorted({str(r["graphs"]) for r in rows}))
        print(
            f"| {'after ready' if after else 'before ready'} | {route} | {med('ready'):.1f} | "
            f"{med('rps1'):,.0f} | {med('p99_1'):.0f} | {graphs} | {med('rps2'):,.0f} | {med('p99_2'):.0f} |"
        )


if __name__ == "__main__":
    main()

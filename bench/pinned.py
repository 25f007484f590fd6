"""One server process alone on a core: its CPU per request, checkouts side by side (issue 46).

  python -m bench.pinned [--process http|model] [--rounds 8] [--duration 3] [CHECKOUT ...]

A whole-server run on a small shared machine mixes a process's own cost with the others' on its cores, and
its noise (±10% here) hides a change of a few percent. Here each checkout (default: this one) serves the
near-free models of bench/ceiling.py in the multi-process layout (`--process http`: one HTTP process and one
model process; `--process model`: two HTTP processes and one model process) and the measured process runs
alone on the last core; everything else (its siblings, the other checkouts' idle servers, the clients) shares
the other cores. The servers all start first; then one load window per checkout in turn (/sentiment, one
short text a request, 64 connections), the order alternating each round, so that a drift of the machine
falls on each checkout alike. Printed: per checkout, the process's CPU µs per request (median and range over
the rounds) and the requests per second it answered.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench.blast import blast, requests
from bench.ceiling import bodies, near_free
from bench.load import process_cpu_s
from bench.machine import describe
from bench.server import REPO, free_port, server_env, stop, wait_ready

ROLES = {"http": ("app.parallel.http", 1), "model": ("app.parallel.engine", 2)}  # -> (module, HTTP processes)
START = "import sys; from app.core.settings import load_settings; from app.parallel.supervisor import run; " \
    "sys.exit(run(load_settings(), {http}, 1))"  # fmt: skip


@dataclass
class Served:
    checkout: str  # and its commit
    url: str
    pid: int  # the measured process
    us: list[float] = field(default_factory=list)  # its CPU µs per request, one a round
    rps: list[float] = field(default_factory=list)


def start(checkout: Path, checkpoints: Path, role: str, stack: ExitStack) -> tuple[str, int]:
    """`checkout`'s server in the layout of `role`, ready -> (url, its root pid)."""
    port = free_port()
    env = {"APP_CHECKPOINT_DIR": str(checkpoints), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning",
           "PYTHONPATH": str(checkout)}  # fmt: skip
    log = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed with the stack)
    cmd = [sys.executable, "-c", START.format(http=ROLES[role][1])]
    proc = subprocess.Popen(cmd, cwd=checkout, env=server_env(env), stdout=log, stderr=log)
    stack.callback(stop, proc, 30)
    url = f"http://127.0.0.1:{port}"

    def output() -> str:
        log.seek(0)
        return str(log.read().decode(errors="replace"))

    wait_ready(proc, url, 180, output)
    return url, proc.pid


def label(checkout: Path) -> str:
    """The checkout and its commit (a + when its tree has changes)."""

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *a], capture_output=True, text=True).stdout.strip()

    dirty = "+" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{checkout} ({git('rev-parse', '--short', 'HEAD') or '?'}{dirty})"


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def measured(root: int, role: str) -> int:
    """The one process of `role` under the server `root`."""
    module = ROLES[role][0].encode()
    found = [p for p in children(root) if module in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} processes of {ROLES[role][0]} under {root}")
    return found[0]


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of `pid` (threads started later inherit their starter's cores)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)


def window(served: Served, seconds: float) -> None:
    """One load window on `served`: its process's CPU µs per request and the requests per second."""
    reqs = [requests(served.url + "/sentiment", bodies("sentiment x1"))]
    before = process_cpu_s(served.pid)
    load = blast([served.url + "/sentiment"], reqs, 64, seconds, 2)
    served.us.append(1e6 * (process_cpu_s(served.pid) - before) / max(1, load.answered))
    served.rps.append(load.rps)


def table(servers: list[Served], role: str) -> str:
    rows = [
        "| checkout | process | CPU µs a request: median (range) | req/s (median) |",
        "|---|---|---:|---:|",
    ]
    for s in servers:
        rows.append(
            f"| {s.checkout} | {role} | {statistics.median(s.us):.1f} ({min(s.us):.1f}–{max(s.us):.1f}) | "
            f"{statistics.median(s.rps):,.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkouts", nargs="*", type=Path, default=[REPO])
    p.add_argument("--process", choices=list(ROLES), default="http")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--duration", type=float, default=3.0, help="seconds a load window (after a 1 s warm-up)")
    args = p.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("bench.pinned needs 2 cores: one for the measured process, one for the rest")  # noqa: T201
        return 2
    alone, rest = {cores[-1]}, set(cores[:-1])
    machine = describe()  # (before this process leaves the last core)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        checkpoints = near_free(Path(tmp))
        servers = []
        for checkout in args.checkouts:
            url, root = start(checkout.resolve(), checkpoints, args.process, stack)
            servers.append(Served(label(checkout.resolve()), url, measured(root, args.process)))
            for pid in [root, *children(root)]:
                pin(pid, rest)
        for s in servers:
            pin(s.pid, alone)
        os.sched_setaffinity(0, rest)  # and the client processes, started from here
        for r in range(args.rounds):
            for s in servers if r % 2 == 0 else servers[::-1]:
                window(s, args.duration)
        print(f"# {machine}; the {args.process} process alone on core {cores[-1]}; {args.rounds} rounds of "  # noqa: T201
              f"{args.duration:g} s")  # fmt: skip
        print(table(servers, args.process))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())

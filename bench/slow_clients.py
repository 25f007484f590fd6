"""A slow-connection flood beside real clients, with the connection limits off and on, as a markdown table.

  python -m bench.slow_clients [--checkpoint-dir checkpoints] [--slow 5000] [--clients 64] [--duration 30]
                               [--server-fds 4096] [--only limits|no-limits | --no-limits] [--set APP_X=value ...]
  python -m bench.slow_clients --only limits --body --slow 300 --set APP_MAX_CONNECTIONS=256  # issue 29

Per run it starts the server on a free 127.0.0.1 port with its descriptors capped at --server-fds (soft and
hard, as a container's `ulimit -n`): `no-limits` is a bare `uvicorn --factory app.main:create_app` (uvicorn's defaults: no
head or body deadline, no cap), `limits` is `python -m app` (app/edge/connections.py, its APP_* defaults). Then:

- the flood (a child process, asyncio raw sockets): --slow connections, opened --connect-rate per second, each
  sending a GET head one byte per second; a connection the server closes is reopened --reconnect-delay s
  later (the attacker resumes), so the flood stays at --slow open connections as far as the server lets it;
- after --ramp s, for --duration s: --clients closed-loop real clients POSTing a short /sentiment text, each
  request on a new connection (distinct users, not one kept-alive pool), --timeout s each; and a probe GETting
  /health on a new connection every 0.5 s (a Kubernetes probe).

Reported per run: the flood's open connections (median over the window) and reconnects, the real clients'
requests, success % (200 within the timeout) and p50/p99, /health success % and max latency, server CPU s.
Acceptance (issue 20): with limits, success >= 95 % and /health max < 1 s with thousands of slow connections.
The flood needs --slow + 64 descriptors of its own (the soft limit is raised to the hard one).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.load import percentile, process_cpu_s
from bench.server import REPO, free_port, server_env, stop, uvicorn_cmd, wait_ready

SLOW_HEAD = b"GET /health HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 4096  # never finished at 1 byte/s
# --body (issue 29): a complete head, then a body of 1000 bytes sent a byte a second
BODY_HEAD = b"POST /sentiment HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"


@dataclass
class Row:
    server: str
    slow_open: float  # median open flood connections during the window
    reconnects: int
    requests: int
    success: float  # %
    p50: float  # ms
    p99: float
    health_ok: float  # %
    health_max: float  # ms
    server_cpu: float  # s


# --- the flood (child process) ------------------------------------------------------------------------------


class _Slow(asyncio.Protocol):
    """An attacker socket: whatever the server answers is dropped; `closed` is set when it is gone."""

    def __init__(self) -> None:
        self.closed = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True


async def _slow_connection(port: int, counts: Any, delay: float, body: bool = False) -> None:
    """Connect, send SLOW_HEAD a byte a second (body: BODY_HEAD, then its body a byte a second); reopen
    `delay` s after the server closes it."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            transport, proto = await asyncio.wait_for(loop.create_connection(_Slow, "127.0.0.1", port), 10)
        except (OSError, TimeoutError):
            await asyncio.sleep(delay)
            continue
        counts[0] += 1
        if body:
            transport.write(BODY_HEAD)
        for byte in b" " * 1000 if body else SLOW_HEAD:
            if proto.closed:
                break
            transport.write(bytes([byte]))
            await asyncio.sleep(1.0)
        transport.close()
        counts[0] -= 1
        counts[1] += 1
        await asyncio.sleep(delay)


async def _flood(port: int, n: int, rate: float, delay: float, counts: Any, body: bool) -> None:
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(_slow_connection(port, counts, delay, body)))
        if (i + 1) % max(1, int(rate / 10)) == 0:
            await asyncio.sleep(0.1)
    await asyncio.gather(*tasks)


def flood(port: int, n: int, rate: float, delay: float, counts: Any, body: bool = False) -> None:
    """The child process: `counts` is a shared array (open connections, reconnects)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_flood(port, n, rate, delay, counts, body))


# --- real clients and the probe (this process) --------------------------------------------------------------


async def real_clients(
    url: str, clients: int, duration: float, timeout: float
) -> tuple[int, int, list[float]]:
    """Closed-loop POST /sentiment, a new connection each -> (requests, successes, sorted latencies ms)."""
    ok, latencies = 0, []
    end = time.monotonic() + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def loop(k: int) -> None:
            nonlocal ok
            while time.monotonic() < end:
                t0 = time.monotonic()
                try:
                    r = await client.post("/sentiment", json={"text": f"A wonderful film, number {k}."})
                    ok += r.status_code == 200
                except httpx.HTTPError:
                    pass
                latencies.append((time.monotonic() - t0) * 1000)

        await asyncio.gather(*(loop(k) for k in range(clients)))
    return len(latencies), ok, sorted(latencies)


async def probe_health(url: str, duration: float, timeout: float) -> list[float | None]:
    """GET /health on a new connection every 0.5 s -> latency ms per probe (None: failed)."""
    results: list[float | None] = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            async with httpx.AsyncClient(timeout=timeout) as c:
                ok = (await c.get(f"{url}/health")).status_code == 200
            results.append((time.monotonic() - t0) * 1000 if ok else None)
        except httpx.HTTPError:
            results.append(None)
        await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - t0)))
    return results


# --- one run ------------------------------------------------------------------------------------------------


def start_server(
    limits: bool, checkpoint_dir: Path, fds: int, extra: dict[str, str], log: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """The server (see the module docstring) with RLIMIT_NOFILE = fds -> (process, port)."""
    port = free_port()
    cmd = [sys.executable, "-m", "app"] if limits else uvicorn_cmd(port)
    env = {"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning"}

    def cap_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))

    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, env=server_env(env | extra), cwd=REPO, stdout=out, stderr=out, preexec_fn=cap_fds
        )
    return proc, port


def run(limits: bool, args: argparse.Namespace, extra: dict[str, str]) -> Row:
    name = "limits (python -m app)" if limits else "no limits (bare uvicorn)"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        proc, port = start_server(limits, args.checkpoint_dir, args.server_fds, extra, log)
        url = f"http://127.0.0.1:{port}"
        counts = mp.Array("q", 2, lock=False)  # the flood's open connections, reconnects
        child = mp.Process(
            target=flood,
            args=(port, args.slow, args.connect_rate, args.reconnect_delay, counts, args.body),
            daemon=True,
        )
        opened: list[int] = []
        try:
            wait_ready(proc, url, 120, lambda: log.read_text(errors="replace"))
            child.start()
            time.sleep(args.ramp)
            cpu0, reconnects0 = process_cpu_s(proc.pid), counts[1]

            async def sample() -> None:
                end = time.monotonic() + args.duration
                while time.monotonic() < end:
                    opened.append(counts[0])
                    await asyncio.sleep(0.5)

            async def both() -> tuple[tuple[int, int, list[float]], list[float | None], None]:
                return await asyncio.gather(
                    real_clients(url, args.clients, args.duration, args.timeout),
                    probe_health(url, args.duration, args.timeout),
                    sample(),
                )

            (requests, ok, latencies), health, _ = asyncio.run(both())
            cpu, reconnects = process_cpu_s(proc.pid) - cpu0, counts[1] - reconnects0
        finally:
            child.kill()
            child.join()
            stop(proc, timeout=30)
    good = [h for h in health if h is not None]
    return Row(
        server=name,
        slow_open=statistics.median(opened or [0]),
        reconnects=reconnects,
        requests=requests,
        success=100 * ok / max(1, requests),
        p50=percentile(latencies, 50),
        p99=percentile(latencies, 99),
        health_ok=100 * len(good) / max(1, len(health)),
        health_max=max(h if h is not None else args.timeout * 1000 for h in health)
        if health
        else float("nan"),
        server_cpu=cpu,
    )


def table(rows: list[Row], args: argparse.Namespace) -> str:
    lines = [
        f"{args.slow} slow connections (1 byte/s, reopened {args.reconnect_delay:g} s after a close) beside "
        f"{args.clients} real clients (POST /sentiment, new connection each, {args.timeout:g} s timeout), "
        f"{args.duration:g} s after a {args.ramp:g} s ramp; server descriptors capped at {args.server_fds}",
        "",
        "| server | slow open (median) | reconnects | real requests | success % | p50 ms | p99 ms "
        "| /health ok % | /health max ms | server CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.server} | {r.slow_open:.0f} | {r.reconnects} | {r.requests} | {r.success:.1f} | {r.p50:.0f} "
            f"| {r.p99:.0f} | {r.health_ok:.1f} | {r.health_max:.0f} | {r.server_cpu:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    p.add_argument("--slow", type=int, default=5000, help="slow connections in the flood")
    p.add_argument("--clients", type=int, default=64, help="concurrent real clients")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of measurement")
    p.add_argument("--ramp", type=float, default=15.0, help="seconds of flood before measuring")
    p.add_argument("--timeout", type=float, default=10.0, help="real client and probe timeout, s")
    p.add_argument("--connect-rate", type=float, default=1000.0, help="new flood connections per second")
    p.add_argument("--reconnect-delay", type=float, default=1.0, help="s before a closed one is reopened")
    p.add_argument("--server-fds", type=int, default=4096, help="the server's RLIMIT_NOFILE (soft = hard)")
    p.add_argument("--only", choices=["limits", "no-limits"], help="one run instead of both")
    p.add_argument("--body", action="store_true", help="slow bodies: a complete POST head, then 1 byte/s")
    p.add_argument(
        "--no-limits", dest="only", action="store_const", const="no-limits", help="= --only no-limits"
    )
    p.add_argument("--set", nargs="*", default=[], metavar="APP_X=VALUE", help="server settings, both runs")
    args = p.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in args.set)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and args.slow + 64 > hard:
        p.error(f"--slow {args.slow} needs {args.slow + 64} descriptors, the hard limit is {hard}")
    modes = [args.only == "limits"] if args.only else [False, True]
    rows = [run(limits, args, extra) for limits in modes]
    print(table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

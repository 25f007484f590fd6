"""A load generator that is cheap per request: several client processes, each with its share of keep-alive
connections, writing prebuilt HTTP/1.1 POST requests on raw sockets (uvloop when installed) in a closed
loop. It reports throughput, latency percentiles and its own CPU: a client process busy most of the time is
flagged, since then the client, not the server, may set the pace.

Used by bench/scale.py; `wrk` (bench/wrk/post.lua) measures the same way where it is installed.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

BUSY = 0.85  # a client process using more than this share of a core may be the bottleneck


@dataclass
class Load:
    rps: float
    p50: float  # ms
    p99: float
    errors: int  # answers other than 200, and dropped connections
    answered: int  # every answer, the warm-up's and the drain's too (the CPU measured covers them)
    client_cpu_s: float  # all client processes
    busiest_client: float  # the busiest client process's CPU share of the run (1.0 = one core)

    @property
    def client_bound(self) -> bool:
        return self.busiest_client > BUSY


def requests(url: str, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None) -> list[bytes]:
    """Each body as the bytes of a whole keep-alive POST request to `url`."""
    parts = urlsplit(url)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    out = []
    for body in bodies:
        data = json.dumps(body, ensure_ascii=False).encode()
        head = (
            f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{extra}\r\n"
        )
        out.append(head.encode() + data)
    return out


async def _connection(
    host: str, port: int, reqs: list[bytes], first: int, start: float, end: float, out: dict[str, Any]
) -> None:
    lat, i = out["lat"], first
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.perf_counter() < end:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                out["errors"] += 1
                await asyncio.sleep(0.05)
                continue
        assert reader is not None
        t0 = time.perf_counter()
        try:
            writer.write(reqs[i % len(reqs)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            await reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            out["errors"] += 1
            writer.close()
            writer = None
            continue
        t1 = time.perf_counter()
        out["answered"] += 1
        if start <= t1 <= end:  # answers completed in the window (not during the warm-up)
            lat.append(t1 - t0)
            if head[9:12] != b"200":
                out["errors"] += 1
        if close:
            writer.close()
            writer = None
        i += 1
    if writer is not None:
        writer.close()


def _client(
    url: str, reqs: list[bytes], connections: int, offset: int, start: float, end: float, queue: Any
) -> None:
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    parts = urlsplit(url)
    out: dict[str, Any] = {"lat": [], "errors": 0, "answered": 0}

    async def run() -> None:
        await asyncio.gather(
            *(
                _connection(parts.hostname or "", parts.port or 80, reqs, offset + k * 7, start, end, out)
                for k in range(connections)
            )
        )

    cpu0 = time.process_time()
    asyncio.run(run())
    queue.put((out["lat"], out["errors"], time.process_time() - cpu0, out["answered"]))


def blast(
    urls: list[str], reqs: list[list[bytes]], connections: int, duration: float, processes: int
) -> Load:
    """`connections` closed-loop connections spread over `processes` client processes for `duration` s (after
    a one-second warm-up); client process k loads urls[k % len(urls)] (full replicas on several ports) with
    reqs[k % len(urls)]."""
    processes = max(1, min(processes, connections))
    ctx = mp.get_context("fork" if hasattr(os, "fork") else "spawn")
    queue = ctx.Queue()
    start = time.perf_counter() + 1.0
    end = start + duration
    procs = []
    for k in range(processes):
        share = connections // processes + (k < connections % processes)
        u = k % len(urls)
        args = (urls[u], reqs[u], share, k * 101, start, end, queue)
        procs.append(ctx.Process(target=_client, args=args, daemon=True))
    for p in procs:
        p.start()
    results = [queue.get(timeout=duration + 120) for _ in procs]
    for p in procs:
        p.join()
    lat = sorted(x for r in results for x in r[0])
    cpu = [r[2] for r in results]
    return Load(
        rps=len(lat) / duration,
        p50=_pct(lat, 50),
        p99=_pct(lat, 99),
        errors=sum(r[1] for r in results),
        answered=sum(r[3] for r in results),
        client_cpu_s=sum(cpu),
        busiest_client=max(cpu) / (duration + 1.0),
    )


def _pct(sorted_s: list[float], q: float) -> float:
    if not sorted_s:
        return float("nan")
    return 1000 * sorted_s[min(len(sorted_s) - 1, int(q / 100 * len(sorted_s)))]

"""The machinery's ceiling, measured on any CPU (issue 46): what the HTTP and model processes cost per item
when the model costs (almost) nothing, beside the shipped models and a bare ASGI app, in one run.

  python -m bench.ceiling [--duration 4] [--connections 64] [--http-workers 2] [--clients 2]
                          [--setups ...] [--routes ...] [--profile DIR]

Setups, each served with APP_HTTP_WORKERS HTTP processes and one model process:
- near-free: sentiment-en and translate-fr-en rebuilt with d_model 16, one layer, one head, around the
  shipped sentiment-en tokenizer (bench/make_tiny_checkpoints.py): the forward costs next to nothing, so
  what is left is ours;
- shipped: the shipped sentiment-en and translate-fr-en;
- bare ASGI: uvicorn with httptools and as many workers, answering every POST with a fixed JSON (`bare_app`
  here): the floor of a Python HTTP server on this machine.

Routes: /sentiment with one text and with 64 texts per request (at 16 connections: 1,024 texts in flight,
APP_MAX_QUEUE), /translate greedy and beam 4, one sentence
per request. Per cell: items/s (texts or sentences answered) and CPU microseconds per item, for the HTTP
processes together and for each kind of thread of the model process, told apart by their OS names
(app/core/threads.py): its event loop (scheduling, admission, the channel's frames), the inference workers,
the channel's I/O threads, and the rest (torch's intra-op threads, CTranslate2's threads, the graph builder,
the GC). CPU counts every answer of the run, its warm-up second included (bench.blast.Load.answered).

"model alone" is the same model on the same inputs in this process, without serving (bench/ceilings.py:
batches of 32, the server's graph and translation engine): the near-free model is cheap, not free, so the
serving machinery's own share of the model process is "model µs/item" less it ("ours").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from bench.blast import Load, blast, requests
from bench.load import EN_WORDS, FR_WORDS, SENTENCE_WORDS, process_cpu_s, sentiment_bodies, texts
from bench.machine import describe
from bench.make_tiny_checkpoints import main as make_tiny
from bench.scale import SENTIMENT_MODEL, TRANSLATE_MODEL, model_dir, process_tree
from bench.server import REPO, code_path, free_port, server_env, stop, wait_ready

ROUTES = {  # name -> (path, items per request)
    "sentiment x1": ("/sentiment", 1),
    "sentiment x64": ("/sentiment", 64),
    "translate greedy": ("/translate", 1),
    "translate beam 4": ("/translate", 1),
}
THREADS = ("loop", "inference", "I/O", "other")
QUEUE = 1024  # APP_MAX_QUEUE's default: items that may wait per model


def bodies(route: str) -> list[dict[str, Any]]:
    """The requests of `route` (a ROUTES name): distinct texts of mixed lengths, sent round-robin."""
    if route.startswith("sentiment"):
        items = texts(EN_WORDS, lengths=(3, 5, 8, 12))
        return sentiment_bodies(items, ROUTES[route][1], {"model": SENTIMENT_MODEL})
    beam = 1 if route.endswith("greedy") else 4
    return [
        {"text": t, "source_lang": "fr", "target_lang": "en", "beam_size": beam, "model": TRANSLATE_MODEL}
        for t in texts(FR_WORDS, lengths=SENTENCE_WORDS)
    ]


_FIXED = b'{"label":"positive","score":0.9}'


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The floor: reads the request body, answers a fixed JSON (no routing, no validation, no model)."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_FIXED)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _FIXED})


def role(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone"
    if b"app.parallel.engine" in cmd:
        return "model"
    if b"app.parallel.http" in cmd or b"uvicorn" in cmd or b"multiprocessing" in cmd:
        return "http"
    return "supervisor"


def thread_kind(pid: int, tid: int) -> str:
    """A model process's thread by its OS name: the loop (the main thread), inference_N, channel-read or
    channel-write, or other."""
    if tid == pid:
        return "loop"
    try:
        name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return "other"
    if name.startswith("inference"):
        return "inference"
    return "I/O" if name.startswith("channel-") else "other"


def roles(root: int) -> list[tuple[int, str]]:
    """(pid, role) of `root` and every process below it; a root with children is their supervisor (the app's,
    or uvicorn --workers' parent)."""
    tree = process_tree(root)
    return [(pid, "supervisor" if pid == root and len(tree) > 1 else role(pid)) for pid in tree]


def cpu_by_kind(root: int) -> dict[str, float]:
    """CPU seconds so far: "http" (every HTTP process) and each model process thread kind."""
    out: dict[str, float] = defaultdict(float)
    for pid, kind in roles(root):
        if kind == "http":
            out["http"] += process_cpu_s(pid)
        elif kind == "model":
            try:
                tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if t.name.isdigit()]
            except OSError:
                continue
            for tid in tids:
                seconds = process_cpu_s(pid, tid)
                if seconds == seconds:  # not NaN: the thread was still there
                    out[thread_kind(pid, tid)] += seconds
    return out


def launch(setup: str, checkpoints: Path | None, http_workers: int, stack: ExitStack) -> tuple[str, int]:
    """Start a setup's server -> (url, root pid), ready; stopped when `stack` closes."""
    port = free_port()
    log = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed with the stack)
    env = {"PYTHONPATH": code_path(REPO)}
    if checkpoints is None:  # the bare ASGI app
        cmd = [sys.executable, "-m", "uvicorn", "bench.ceiling:bare_app", "--host", "127.0.0.1", "--port",
               str(port), "--http", "httptools", "--no-access-log", "--log-level", "warning"]  # fmt: skip
        if http_workers > 1:
            cmd += ["--workers", str(http_workers)]
    else:
        cmd = [sys.executable, "-m", "app"]
        env |= {"APP_CHECKPOINT_DIR": str(checkpoints), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning",
                "APP_HTTP_WORKERS": str(http_workers), "APP_MODEL_PROCESSES": "1"}  # fmt: skip
    proc = subprocess.Popen(cmd, env=server_env(env), cwd=REPO, stdout=log, stderr=log)
    stack.callback(stop, proc, 30)
    url = f"http://127.0.0.1:{port}"

    def output() -> str:
        log.seek(0)
        return str(log.read().decode(errors="replace"))

    if checkpoints is None:
        wait_bare(proc, url, output)
    else:
        wait_ready(proc, url, 180, output)
    return url, proc.pid


def wait_bare(proc: subprocess.Popen[bytes], url: str, output: Any) -> None:
    """Until the bare app answers a POST (it has no /ready)."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited: {output()}")
        try:
            if httpx.post(url + "/sentiment", json={}, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"uvicorn did not answer: {output()}")


def alone_us(checkpoints: Path, route: str) -> float:
    """CPU µs per item of the model alone on `route`'s inputs (bench/ceilings.py, batches of 32), on one
    intra-op thread as each of the server's inference workers (more would count idle threads' spinning)."""
    import torch

    from bench.ceilings import ceiling

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CTranslate2's intra_threads follow it there
    try:
        if route.startswith("sentiment"):
            sentiment = {"model": SENTIMENT_MODEL}
            inputs = texts(EN_WORDS, lengths=(3, 5, 8, 12))
            got = ceiling(checkpoints, sentiment, {}, 1, runs=5, sentiment_inputs=inputs)
            return 1000 * got["/sentiment"][1]
        beam = 1 if route.endswith("greedy") else 4
        got = ceiling(checkpoints, {}, {"model": TRANSLATE_MODEL, "target_lang": "en"}, beam, runs=2)
        return 1000 * got["/translate"][1]
    finally:
        torch.set_num_threads(threads)


def cell(
    url: str, root: int, route: str, connections: int, duration: float, clients: int, spy: Path | None = None
) -> tuple[Load, dict[str, float]]:
    """One route under load -> (the load, CPU seconds by "http" and model thread kind over it). With `spy`
    (a file stem), py-spy samples the model process and one HTTP process over the load, into stem-*.txt."""
    path, _ = ROUTES[route]
    reqs = [requests(url + path, bodies(route))]
    spies = profile(root, duration, spy) if spy is not None else []
    before = cpu_by_kind(root)
    load = blast([url + path], reqs, connections, duration, clients)
    after = cpu_by_kind(root)
    for p in spies:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a sampler that hangs: its cell's table row still counts
            p.kill()
    return load, {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("http", *THREADS)}


def profile(root: int, seconds: float, stem: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy record, started now for `seconds`, of the model process and the first HTTP process: busy
    samples only, by thread, without pausing them (--nonblocking), as collapsed stacks (stem-model.txt,
    stem-http.txt). py-spy is not a dependency: found on PATH or beside this interpreter. Its sampling takes
    a little CPU from the cell it profiles (measure without --profile for the cleanest figures)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print(f"# no py-spy ({spy}): {stem.name} not profiled", flush=True)  # noqa: T201
        return []
    procs: list[subprocess.Popen[bytes]] = []
    found = roles(root)
    for kind in ("model", "http"):
        pid = next((p for p, r in found if r == kind), None)
        if pid is None:
            continue
        out = stem.with_name(f"{stem.name}-{kind}.txt")
        cmd = [spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", "200",
               "--threads", "--nonblocking", "--format", "raw", "--output", str(out)]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def near_free(tmp: Path) -> Path:
    """sentiment-en and translate-fr-en at d_model 16, one layer, one head, the shipped tokenizer."""
    out = tmp / "near-free"
    tokenizer = REPO / "checkpoints" / SENTIMENT_MODEL / "tokenizer.model"
    argv = [str(out), "--d-model", "16", "--layers", "1", "--heads", "1", "--tokenizer", str(tokenizer)]
    if make_tiny(argv) != 0:
        raise RuntimeError("bench/make_tiny_checkpoints.py failed")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=4.0, help="seconds per cell (after a 1 s warm-up)")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--http-workers", type=int, default=2)
    p.add_argument("--clients", type=int, default=2, help="client processes (bench/blast.py)")
    p.add_argument("--setups", nargs="+", default=["near-free", "shipped", "bare ASGI"])
    p.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    p.add_argument("--profile", type=Path, default=None, help="a folder for py-spy profiles of each cell")
    args = p.parse_args(argv)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(  # noqa: T201
        f"# {describe()}; {args.http_workers} HTTP processes + 1 model process; {args.connections} "
        f"connections from {args.clients} client processes; {args.duration:g} s a cell\n"
        "| setup | route | items/s | errors | HTTP µs/item | model loop | inference | I/O | other "
        "| model µs/item | model alone | ours | busiest client |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {"near-free": near_free(Path(tmp)), "bare ASGI": None}
        if "shipped" in args.setups:
            (shipped := Path(tmp) / "shipped").mkdir()
            dirs["shipped"] = model_dir(REPO / "checkpoints", shipped)
        for setup in args.setups:
            with ExitStack() as stack:
                checkpoints = dirs[setup]
                url, root = launch(setup, checkpoints, args.http_workers, stack)
                routes = args.routes if checkpoints is not None else ["sentiment x1"]
                for route in routes:
                    n = ROUTES[route][1]
                    # 64 texts a request: fewer connections, so that what waits stays within APP_MAX_QUEUE
                    # (1,024 items) and every answer carries its items (a 429 carries none)
                    conns = max(1, min(args.connections, QUEUE // n))
                    spy = args.profile / f"{setup}-{route}".replace(" ", "_") if args.profile else None
                    load, cpu = cell(url, root, route, conns, args.duration, args.clients, spy)
                    items = max(1, (load.answered - load.errors) * n)
                    us = {k: 1e6 * v / items for k, v in cpu.items()}
                    model = sum(us[k] for k in THREADS)
                    alone = alone_us(checkpoints, route) if checkpoints is not None else 0.0
                    row = [setup, route, f"{load.rps * n:,.0f}", str(load.errors),
                           f"{us['http']:.0f}", *(f"{us[k]:.1f}" for k in THREADS), f"{model:.1f}",
                           f"{alone:.1f}", f"{model - alone:.1f}",
                           f"{load.busiest_client:.0%}" + (" (client-bound?)" if load.client_bound else "")]  # fmt: skip
                    print("| " + " | ".join(row) + " |", flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

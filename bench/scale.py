"""The scaling matrix of issues 28 and 36 on the machine at hand, in at most ~8 minutes: each server setup (one
process, N HTTP processes, several model processes (APP_MODEL_PROCESSES), N full replicas, plain replicas
pinned to 2 cores each (cores / 2 of them, CPU only: the issue-36 comparison), pinned to fewer cores; on a
GPU: dtypes and batch sizes too) under the same load from several client processes (bench/blast.py), one
text per request (/sentiment: a short English text; /translate: one sentence, beam 4). Prints a markdown
table with the server's CPU (its whole process tree) and the clients' beside the throughput, and flags
client-bound cells; then the model alone on the same inputs (bench/ceilings.py: no HTTP), in the same run.

  python -m bench.scale [--duration 5] [--connections 64] [--baseline /path/to/main/checkout] [--quick]
                        [--only NAME ...] [--env "APP_X=1 APP_Y=2" ...]

--baseline also runs that checkout's `python -m app` (its defaults, batched and not, and with N HTTP processes
when the defaults are one: its model process's loop) in the same run: the no-regression check (this
branch's defaults vs main's /sentiment throughput and batching gain). Each --env adds a row: the defaults
with those settings (a setting to choose by measurement, beside the defaults in the same run).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from app.core.settings import Settings
from bench.blast import Load, blast, requests
from bench.load import EN_WORDS, FR_WORDS, SENTENCE_WORDS, process_cpu_s, texts
from bench.machine import cpu_name
from bench.server import REPO, code_path, free_port, server_env, stop, wait_ready

SENTIMENT_MODEL, TRANSLATE_MODEL = "sentiment-en", "translate-fr-en"
MAX_REPLICAS = 4  # as the row (4 full replicas on one GPU)


@dataclass
class Setup:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    replicas: int = 1  # full servers on their own ports, the clients spread over them
    cores: str | None = None  # taskset -c CORES
    pins: list[str] | None = None  # taskset -c per replica (instead of `cores`)
    cwd: Path = REPO  # another checkout: the baseline
    routes: tuple[str, ...] = ("/sentiment", "/translate")


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def setups(cores: int, cuda: bool, baseline: Path | None) -> list[Setup]:
    """The matrix rows for this machine: the defaults first (also measured at the other connection counts),
    then the baseline's (adjacent: the no-regression ratio), then the variants."""
    auto = Settings().http_workers_count()  # APP_HTTP_WORKERS=0
    auto_m = Settings().model_processes_count()  # APP_MODEL_PROCESSES=0
    n = max(2, auto)
    one = {"APP_HTTP_WORKERS": "1", "APP_MODEL_PROCESSES": "1"}
    rows = [Setup(f"defaults ({_count(auto, 'HTTP process')}, {_count(auto_m, 'model process')})")]
    if baseline is not None:
        only = ("/sentiment",)
        rows += [
            Setup("baseline: defaults", cwd=baseline, routes=only),
            Setup("unbatched", {"APP_MAX_BATCH_SIZE": "1"}, routes=only),
            Setup("baseline: unbatched", {"APP_MAX_BATCH_SIZE": "1"}, cwd=baseline, routes=only),
        ]
    if auto > 1 or auto_m > 1:
        rows.append(Setup("1 process", one))
    if auto_m > 1:
        rows.append(Setup("1 model process", {"APP_MODEL_PROCESSES": "1"}))
    # model processes of 2 cores each (as the pinned replicas below), the queue work raised to allow them
    m = max(2, min(16, (cores - (auto if auto > 1 else 0)) // 2))
    if m != auto_m:
        work = str(max(Settings().max_queue_work, m * Settings().max_work))
        rows.append(
            Setup(f"APP_MODEL_PROCESSES={m}", {"APP_MODEL_PROCESSES": str(m), "APP_MAX_QUEUE_WORK": work})
        )
    if cuda:  # the rows: main's CUDA defaults were float16 in batches of 32 items
        main_cuda = {"APP_DTYPE": "float16", "APP_MAX_BATCH_SIZE": "32", "APP_MAX_BATCH_WORK": "8192"}
        rows += [
            Setup("1 process, float16, batch 32 (main's defaults)", one | main_cuda),
            Setup("float16", {"APP_DTYPE": "float16"}),
            Setup("eager (APP_TORCHSCRIPT=false)", {"APP_TORCHSCRIPT": "false"}),  # new shapes; ready
        ]
    if auto != n:
        several = {"APP_HTTP_WORKERS": str(n)}
        rows.append(Setup(f"APP_HTTP_WORKERS={n}", several))
        if baseline is not None:  # the model process's loop, against main's in the same run
            rows.append(
                Setup(f"baseline: APP_HTTP_WORKERS={n}", several, cwd=baseline, routes=("/sentiment",))
            )
    # the cores shared out: each replica runs its part of one server's inference workers
    workers = str(max(1, Settings().inference_workers_count() // min(n, MAX_REPLICAS)))
    replicas = min(n, MAX_REPLICAS)
    rows.append(
        Setup(f"{replicas} full replicas", one | {"APP_INFERENCE_WORKERS": workers}, replicas=replicas)
    )
    if cuda:
        rows += [
            Setup("CPU only", {"APP_DEVICE": "cpu"}),
            Setup("CPU only, 1 process", one | {"APP_DEVICE": "cpu"}),
        ]
    # plain replicas, each one process pinned to 2 cores, sharing no batches and no limits (issue 36)
    usable = sorted(os.sched_getaffinity(0))
    pins = [f"{usable[i]},{usable[i + 1]}" for i in range(0, len(usable) - 1, 2)] or [str(usable[0])]
    plain = one | {"APP_DEVICE": "cpu"}
    rows.append(Setup(f"{len(pins)} plain replica(s) x 2 cores (CPU)", plain, len(pins), pins=pins))
    pin = "0,1" if cores > 2 else "0"
    rows.append(Setup(f"CPU pinned to {len(pin.split(','))} core(s)", {"APP_DEVICE": "cpu"}, cores=pin))
    return rows


def env_rows(envs: list[str]) -> list[Setup]:
    """--env's rows: the defaults with each "NAME=VALUE NAME=VALUE" string's settings, named by it (once
    each). ValueError for a word without a NAME=."""
    if bad := [kv for env in envs for kv in env.split() if "=" not in kv[1:]]:
        raise ValueError(f"--env takes NAME=VALUE settings, got {bad}")
    return [Setup(env, dict(kv.split("=", 1) for kv in env.split())) for env in dict.fromkeys(envs)]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'es' if n > 1 else ''}"


def model_dir(root: Path, tmp: Path) -> Path:
    """A directory with only the two measured models (a quicker start than every checkpoint)."""
    for name in (SENTIMENT_MODEL, TRANSLATE_MODEL):
        (tmp / name).symlink_to((root / name).resolve())
    return tmp


def process_tree(pid: int) -> list[int]:
    """pid and its descendants (Linux /proc). Processes come and go while it walks: one that is gone
    between the listing and the read is skipped, with its children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:  # the thread or the process exited since the glob listed it
                continue
    return out


@dataclass
class Launched:
    """A setup's server processes, started, maybe not ready yet."""

    setup: Setup
    urls: list[str]
    procs: list[subprocess.Popen[bytes]]
    logs: list[Any]
    t0: float

    def wait(self) -> float:
        """Seconds from the launch to every replica's /ready 200 (RuntimeError with the output if one fails)."""
        for url, proc, log in zip(self.urls, self.procs, self.logs, strict=True):

            def output(log: Any = log) -> str:
                log.seek(0)
                return str(log.read().decode(errors="replace"))

            wait_ready(proc, url, 180, output)
        return time.monotonic() - self.t0


def launch(setup: Setup, checkpoints: Path, stack: ExitStack) -> Launched:
    """Start the setup's server(s) (SIGTERM when `stack` closes)."""
    out = Launched(setup, [], [], [], time.monotonic())
    for i in range(setup.replicas):
        port = free_port()
        env = {"APP_CHECKPOINT_DIR": str(checkpoints), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning"}
        env["PYTHONPATH"] = code_path(setup.cwd)  # its own code, whatever this process's PYTHONPATH names
        cmd = [sys.executable, "-m", "app"]
        if (pin := setup.pins[i] if setup.pins else setup.cores) is not None:
            cmd = ["taskset", "-c", pin, *cmd]
        log = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed with the stack)
        proc = subprocess.Popen(cmd, env=server_env(env | setup.env), cwd=setup.cwd, stdout=log, stderr=log)
        stack.callback(stop, proc, 30)
        out.urls.append(f"http://127.0.0.1:{port}")
        out.procs.append(proc)
        out.logs.append(log)
    return out


def bodies(route: str) -> list[dict[str, Any]]:
    if route == "/sentiment":
        return [{"text": t, "model": SENTIMENT_MODEL} for t in texts(EN_WORDS, lengths=(3, 5, 8, 12))]
    return [
        {"text": t, "source_lang": "fr", "target_lang": "en", "beam_size": 4, "model": TRANSLATE_MODEL}
        for t in texts(FR_WORDS, lengths=SENTENCE_WORDS)
    ]


def is_model_process(pid: int) -> bool:
    """Whether `pid` is a model process (python -m app.parallel.engine)."""
    try:
        return b"app.parallel.engine" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def cell(
    urls: list[str], pids: list[int], route: str, c: int, duration: float, clients: int
) -> tuple[Load, float, float, float | None]:
    """One measurement -> (load, server CPU seconds over the run, the busiest event loop's CPU seconds, the
    busiest model process's loop's; None without one).

    Each process's main thread runs its event loop; the busiest one is the serial part that more cores do not
    speed up (1 / its seconds per request bounds the throughput). The model process's is the part more HTTP
    processes do not speed up either."""
    reqs = [requests(u + route, bodies(route)) for u in urls]
    tree = [p for pid in pids for p in process_tree(pid)]
    cpu0 = {p: process_cpu_s(p) for p in tree}
    loop0 = {p: process_cpu_s(p, p) for p in tree}
    load = blast([u + route for u in urls], reqs, c, duration, clients)
    server_s = sum(process_cpu_s(p) - cpu0[p] for p in tree)
    loops = {p: process_cpu_s(p, p) - loop0[p] for p in tree}
    model = [s for p, s in loops.items() if is_model_process(p)]
    return load, server_s, max(loops.values()), max(model) if model else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    p.add_argument(
        "--connections",
        type=int,
        nargs="+",
        default=None,
        help="the first for every setup, the others for the defaults; default 64 (8+ cores: 256 1024)",
    )
    p.add_argument("--clients", type=int, default=0, help="client processes; 0: a quarter of the cores, 1-8")
    p.add_argument(
        "--repeats", type=int, default=0, help="rounds over every cell (medians); 0: 3 below 8 cores, else 1"
    )
    p.add_argument("--baseline", type=Path, default=None, help="a checkout of main, measured in the same run")
    p.add_argument("--only", nargs="*", default=None, help="setup names to run (default: all)")
    p.add_argument("--env", nargs="*", default=[], help='more rows: "NAME=VALUE NAME=VALUE" each')
    p.add_argument("--routes", nargs="*", default=None, help="routes to measure (default: both)")
    p.add_argument("--budget-s", type=float, default=400.0, help="no new cell after this many seconds")
    p.add_argument("--no-ceiling", action="store_true", help="skip the model-alone ceiling")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the servers are stopped on the way out
    cores, cuda = usable_cores(), torch.cuda.is_available()
    conns = args.connections or ([64] if cores < 8 else [256, 1024])
    clients = args.clients or max(1, min(8, cores // 4))
    repeats = args.repeats or (3 if cores < 8 else 1)
    device = torch.cuda.get_device_name() if cuda else "no GPU"
    rows = [s for s in setups(cores, cuda, args.baseline) if args.only is None or s.name in args.only]
    try:
        rows += env_rows(args.env)
    except ValueError as e:
        p.error(str(e))
    cells = [
        (s, r, c)
        for i, s in enumerate(rows)
        for r in s.routes
        if args.routes is None or r in args.routes
        for c in (conns if i == 0 else conns[:1])
    ]
    print(
        f"# {cores} cores ({cpu_name()}), {device}; {clients} client process(es); {args.duration:g} s per cell, "
        f"median of {repeats} interleaved round(s); every server up at once, idle but the measured one (ready s: "
        f"the first row's alone, the others' started together)\n",
        flush=True,
    )
    measured: dict[tuple[str, str, int], list[tuple[Load, float, float, float | None]]] = {}
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        checkpoints = model_dir(args.checkpoint_dir, Path(tmp))
        # the defaults alone (their ready time is the clean one), then every other setup at once
        servers: dict[str, tuple[list[str], list[int], float]] = {}
        groups = (lambda: rows[:1], lambda: rows[1:])  # the second launched once the first is ready
        for group in groups:
            for launched in [launch(s, checkpoints, stack) for s in group()]:
                try:
                    ready_s = launched.wait()
                except RuntimeError as e:
                    print(
                        f"{launched.setup.name}: failed to start: {str(e).splitlines()[0]}", file=sys.stderr
                    )
                    continue
                servers[launched.setup.name] = (launched.urls, [p.pid for p in launched.procs], ready_s)
        for round_ in range(repeats):
            for setup, route, c in cells:
                if setup.name not in servers or time.monotonic() - began > args.budget_s:
                    continue
                urls, pids, _ = servers[setup.name]
                # a CPU answers a /translate at c=64 in seconds: a longer cell, or each counts few answers
                seconds = args.duration * (3 if route == "/translate" and not cuda else 1)
                m = cell(urls, pids, route, c, seconds, clients)
                measured.setdefault((setup.name, route, c), []).append(m)
                print(
                    f"round {round_ + 1}: {setup.name} {route} c={c}: {m[0].rps:,.1f} req/s",
                    file=sys.stderr,
                    flush=True,
                )
    print(HEADER)
    results: dict[tuple[str, str, int], float] = {}
    for (name, route, c), ms in measured.items():
        load, server_s, loop_s, model_s = sorted(ms, key=lambda m: m[0].rps)[len(ms) // 2]
        results[(name, route, c)] = load.rps
        n = max(1, load.answered)  # the CPU figures cover the warm-up and the drain too
        flag = " (client-bound)" if load.client_bound else ""
        spread = (
            f" ({min(m[0].rps for m in ms):,.0f}–{max(m[0].rps for m in ms):,.0f})" if len(ms) > 1 else ""
        )
        print(
            f"| {name} | {route} | {c} | {load.rps:,.0f}{spread}{flag} | {load.p50:.1f} | {load.p99:.1f} | "
            f"{load.errors} | {1000 * server_s / n:.2f} | {1000 * loop_s / n:.2f} | "
            f"{'–' if model_s is None else f'{1000 * model_s / n:.2f}'} | "
            f"{1000 * load.client_cpu_s / n:.2f} | {load.busiest_client:.0%} | {servers[name][2]:.1f} |"
        )
    if args.baseline is not None:
        _no_regression(results, conns[0])
    if not args.no_ceiling:
        _model_alone(args.checkpoint_dir, cuda, args.routes)
    return 0


def _model_alone(checkpoints: Path, cuda: bool, routes: list[str] | None) -> None:
    """The model alone (model.inference, no HTTP) on the same inputs, after the servers have stopped: the
    ceiling the rows above are compared with (issue 36's targets)."""
    from bench.ceilings import ceiling

    batch = 256 if cuda else 32  # the GPU ceiling: batches of 256 (translation: 128-512)
    sentiment = {"model": SENTIMENT_MODEL} if routes is None or "/sentiment" in routes else {}
    translate = (
        {"model": TRANSLATE_MODEL, "target_lang": "en"} if routes is None or "/translate" in routes else {}
    )
    inputs = [b["text"] for b in bodies("/sentiment")]
    found = ceiling(
        checkpoints, sentiment, translate, 4, device="cuda" if cuda else "cpu", batch_size=batch,
        sentiment_inputs=inputs,
    )  # fmt: skip
    print(
        f"\n| the model alone (no HTTP, batches of {batch}, {'CUDA' if cuda else 'CPU'}) | texts/s | CPU ms/text |"
    )
    print("|---|---:|---:|")
    for name, (rate, cpu_ms) in found.items():
        print(f"| {name} | {rate:,.0f} | {cpu_ms:.2f} |")


HEADER = """| setup | route | conns | req/s (median, range) | p50 ms | p99 ms | errors | server CPU ms/req | busiest loop ms/req | model loop ms/req | client CPU ms/req | busiest client | ready s |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"""


def _no_regression(results: dict[tuple[str, str, int], float], c: int) -> None:
    get = results.get
    ours = next(
        (
            v
            for (name, r, k), v in results.items()
            if name.startswith("defaults") and (r, k) == ("/sentiment", c)
        ),
        None,
    )
    theirs = get(("baseline: defaults", "/sentiment", c))
    ours_1, theirs_1 = get(("unbatched", "/sentiment", c)), get(("baseline: unbatched", "/sentiment", c))
    if ours and theirs:
        print(f"\n/sentiment defaults at c={c}: {ours / theirs:.3f}x the baseline")
    if ours and theirs and ours_1 and theirs_1:
        print(f"batching gain: {ours / ours_1:.2f}x here, {theirs / theirs_1:.2f}x the baseline")


if __name__ == "__main__":
    sys.exit(main())

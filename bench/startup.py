"""How long `python -m app` takes to be ready, and where that time goes (issue 36, "ready quickly").

    python -m bench.startup [--workers 1 2 4 8] [--repeats 1] [--baseline /path/to/main]

Ready table: per tree (the baseline's first, same run) and APP_HTTP_WORKERS, the seconds from the launch to
/ready 200, the CPU seconds every process of the server had used by then (they transfer to a machine of
more cores better than wall time: there the processes run side by side), and from the logs when the
supervisor had started its processes (after its own checks: "serving on"), when the model process had
loaded its models ("ready: ..."), when the last HTTP process was up (uvicorn's "Application startup
complete") and when the model process had built its TorchScript graphs, after ready ("graphs ready in");
/ready follows within the model process's state poll (app/parallel/engine.py STATE_POLL_S).

Phase table: per tree, each step of a start-up run alone in a fresh process (wall and CPU seconds): what an
HTTP process does (its imports, the routing registry, the language detector, the tokenizers) and what the
model process does (its imports, the device, the weights, the handlers, the warm-up; then, after ready,
the TorchScript graphs: APP_TORCHSCRIPT_AFTER_READY; a tree without it traces in the handlers' step).
Both trees serve this checkout's checkpoints (APP_CHECKPOINT_DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from statistics import median

from bench.server import REPO, code_path, free_port, server_env, stop, wait_ready

CHECKPOINTS = REPO / "checkpoints"
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")

# a probe's clock: mark(step) adds the wall and CPU seconds since the last mark to out[step]
PROBE_CLOCK = """
import inspect, json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out, t, c = {}, time.monotonic(), cpu()
def mark(name):
    global t, c
    wall, used = out.get(name, (0.0, 0.0))
    out[name] = (wall + time.monotonic() - t, used + cpu() - c)
    t, c = time.monotonic(), cpu()
"""

# an HTTP process's start-up, step by step (the baseline's RemoteService resolved the device for discovery)
HTTP_PROBE = (
    PROBE_CLOCK
    + """
import app.parallel.http
from app.core.metrics import Metrics
from app.core.settings import load_settings
from app.parallel.remote import RemoteService
from app.registry import Registry
from app.text.langid import LanguageDetector
mark("imports")
s = load_settings()
if hasattr(RemoteService, "_load_local"):
    device = dtype = None
else:
    device = s.torch_device()
    dtype = s.torch_dtype(device)
registry = Registry.discover(s.check_checkpoint_dir(), device, dtype)
mark("routing registry")
if hasattr(registry, "languages"):  # a checkout before the tasks' routing
    LanguageDetector(registry.languages)
else:
    from app.tasks import routing
    from app.tasks.served import default_tasks
    LanguageDetector(routing.languages(default_tasks(), s, registry))
mark("language detector")
RemoteService(s, Metrics(), "-")._load_text(registry)
mark("tokenizers")
out["torch imported"] = "torch" in sys.modules
print(json.dumps(out))
"""
)

# the model process's start-up, step by step, one model after another (as on CUDA: one inference worker)
MODEL_PROBE = (
    PROBE_CLOCK
    + """
import app.parallel.engine
from app.core.settings import load_settings
from app.registry import Registry
from app.tasks.served import default_tasks
mark("imports")
s = load_settings()
device = s.torch_device()
dtype = s.torch_dtype(device)
mark("device (imports torch)")
if device.type == "cuda":  # its context, made by the first tensor there
    import torch
    torch.zeros(1, device=device)
    torch.cuda.synchronize(device)
    mark("CUDA context")
registry = Registry.discover(s.check_checkpoint_dir(), device, dtype)
tasks = default_tasks()
for task in tasks:
    task.prepare(s, registry)
mark("registry")
after = []
for name, entry in registry.entries.items():
    loaded = registry.load(entry if "entry" in inspect.signature(registry.load).parameters else name)
    mark("weights")
    handlers = [task.load(entry, loaded) for task in tasks if task.serves(entry)]
    mark("handlers (tracing, unless after ready)")
    for handler in handlers:
        if (warmup := getattr(handler, "warmup", None)) is not None:
            warmup()
    mark("warm-up")
    after += [h for h in handlers if getattr(h, "compiled", None) is False and s.torchscript]
for handler in after:
    handler.compile()
    mark("after ready: graphs (tracing, warm-up)")
print(json.dumps(out))
"""
)


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of `root` and every process below it, those that were waited for included."""
    tick = os.sysconf("SC_CLK_TCK")
    stats, children = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(pid)] = fields
        children.setdefault(int(fields[1]), []).append(int(pid))
    todo, total = [root], 0.0
    while todo:
        pid = todo.pop()
        if (fields := stats.get(pid)) is not None:
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        todo += children.get(pid, [])
    return total


def log_times(log: str, start: float) -> tuple[float | None, float | None, float | None, float | None]:
    """Seconds after `start` at which the supervisor had started its processes ("serving on"), the model
    process logged "ready:", the last HTTP process was up and the model process had built its graphs."""
    spawned = models = http = graphs = None
    for line in log.splitlines():
        if not (m := LOG_TIME.match(line)):
            continue
        at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp() - start
        if "app.parallel " in line and ": serving on " in line:
            spawned = at
        elif "app.runtime.lifecycle" in line and ": ready: " in line:
            models = at
        elif "Application startup complete" in line:
            http = at
        elif "app.runtime.lifecycle" in line and ": graphs ready in " in line:
            graphs = at
    return spawned, models, http, graphs


def launch(tree: Path, workers: int, checkpoints: Path = CHECKPOINTS) -> dict[str, float | None]:
    """One start of `python -m app` from `tree` -> ready s, CPU s at ready, processes started at, models
    loaded at, last HTTP process up at, graphs built at (APP_TORCHSCRIPT_AFTER_READY)."""
    port = free_port()
    env = server_env({
        "APP_HOST": "127.0.0.1", "APP_PORT": str(port), "APP_HTTP_WORKERS": str(workers),
        "APP_CHECKPOINT_DIR": str(checkpoints), "APP_LOG_LEVEL": "info", "APP_LOG_FORMAT": "text",
        "PYTHONPATH": code_path(tree),
    })  # fmt: skip
    with tempfile.TemporaryFile() as log:
        start = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "app"], cwd=tree, env=env, stdout=log, stderr=log)
        try:
            ready = wait_ready(proc, f"http://127.0.0.1:{port}", 300, graphs=False)
            cpu = tree_cpu(proc.pid)
            wait_ready(proc, f"http://127.0.0.1:{port}", 300)  # and the graphs built
        finally:
            stop(proc)
        log.seek(0)
        spawned, models, http, graphs = log_times(log.read().decode(errors="replace"), start)
    return {"ready": ready, "cpu": cpu, "spawned": spawned, "models": models, "http": http, "graphs": graphs}


def probe(tree: Path, code: str, checkpoints: Path = CHECKPOINTS) -> dict[str, object]:
    """HTTP_PROBE or MODEL_PROBE run on `tree`'s code -> step -> [wall s, CPU s] (and "torch imported")."""
    env = server_env(
        {"APP_CHECKPOINT_DIR": str(checkpoints), "APP_LOG_LEVEL": "warning", "PYTHONPATH": code_path(tree)}
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--repeats", type=int, default=1, help="starts per setup (median; interleaved)")
    p.add_argument("--baseline", type=Path, help="another checkout (e.g. main), measured first in this run")
    p.add_argument("--checkpoints", type=Path, default=CHECKPOINTS, help="APP_CHECKPOINT_DIR for both trees")
    args = p.parse_args()
    trees = ([("before", args.baseline.resolve())] if args.baseline else []) + [("after", REPO)]
    print(
        f"{os.cpu_count()} CPUs ({os.sched_getaffinity(0).__len__()} usable); load {os.getloadavg()[0]:.1f}"
    )
    runs: dict[tuple[str, int], list[dict[str, float | None]]] = {}
    for _ in range(args.repeats):
        for workers in args.workers:
            for label, tree in trees:
                runs.setdefault((label, workers), []).append(launch(tree, workers, args.checkpoints))
    print(
        "\n| tree | HTTP processes | ready s | CPU s at ready (all processes) | processes started at s | "
        "models loaded at s | last HTTP process up at s | graphs built at s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for workers in args.workers:
        for label, _ in trees:
            rows = runs[(label, workers)]

            def med(key: str, rows: list[dict[str, float | None]] = rows) -> float | None:
                values = [r[key] for r in rows if r[key] is not None]
                return median(values) if values else None  # type: ignore[type-var]

            print(
                f"| {label} | {workers} | {fmt(med('ready'))} | {fmt(med('cpu'))} | {fmt(med('spawned'))} | "
                f"{fmt(med('models'))} | {fmt(med('http'))} | {fmt(med('graphs'))} |"
            )
    for role, code in (("HTTP process", HTTP_PROBE), ("model process", MODEL_PROBE)):
        phases = {label: probe(tree, code, args.checkpoints) for label, tree in trees}
        names = list(dict.fromkeys(name for steps in phases.values() for name in steps))  # either tree's
        print(f"\n| {role}: step, each alone in a fresh process | " + " | ".join(
            f"{label} wall s | {label} CPU s" for label, _ in trees) + " |")  # fmt: skip
        print("|---|" + "---:|---:|" * len(trees))
        for name in names:
            cells = []
            for label, _ in trees:
                value = phases[label].get(name)
                if isinstance(value, list):
                    cells += [f"{value[0]:.2f}", f"{value[1]:.2f}"]
                else:
                    cells += ["-" if value is None else str(value), ""]
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

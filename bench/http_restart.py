"""One HTTP process of `python -m app` (APP_HTTP_WORKERS=2) SIGKILLed under load: how long its restart takes,
what the clients got meanwhile and what /ready answered (docs/scaling.md: why /ready stays 200 while one
HTTP process restarts). Prints a markdown table; with --baseline, that checkout's server in the same run.

  python -m bench.http_restart [--checkpoint-dir checkpoints] [--clients 8] [--baseline /path/to/main]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.scale import process_tree
from bench.server import code_path, free_port, server_env, stop, wait_ready

REPO = Path(__file__).resolve().parents[1]
HTTP_UP = 'transformer_serving_processes{role="http"}'


def http_pids(root: int) -> list[int]:
    out = []
    for pid in process_tree(root)[1:]:
        try:
            if b"app.parallel.http" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def http_up(url: str) -> float:
    """HTTP processes the model process counts up (0 when the scrape fails)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0.0
    return next((float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(HTTP_UP + " ")), 0.0)


class Recorder:
    """Client threads sending /sentiment on keep-alive connections, and a /ready probe every 0.1 s."""

    def __init__(self, url: str, clients: int) -> None:
        self.url, self.done = url, threading.Event()
        self.answers: list[tuple[float, str]] = []
        self.probes: list[tuple[float, str]] = []
        self.threads = [threading.Thread(target=self._client) for _ in range(clients)]
        self.threads.append(threading.Thread(target=self._probe))
        for t in self.threads:
            t.start()

    def _client(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            while not self.done.is_set():
                start = time.monotonic()
                try:
                    outcome = str(c.post("/sentiment", json={"text": "a good film"}).status_code)
                except httpx.HTTPError as e:
                    outcome = type(e).__name__
                self.answers.append((start, outcome))

    def _probe(self) -> None:
        while not self.done.wait(0.1):
            start = time.monotonic()
            try:
                outcome = str(httpx.get(f"{self.url}/ready", timeout=3).status_code)
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            self.probes.append((start, outcome))

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join()


def run(label: str, root: Path, checkpoint_dir: Path, clients: int) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_PORT": str(port), "APP_HTTP_WORKERS": "2"}
    env = server_env(env | {"APP_LOG_LEVEL": "warning", "PYTHONPATH": code_path(root)})
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "app"], env=env, cwd=root, stdout=log, stderr=log)
        try:
            wait_ready(proc, url, 300)
            recorder = Recorder(url, clients)
            time.sleep(2)  # load running on both processes
            victim = http_pids(proc.pid)[0]
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            while not (victim not in (pids := http_pids(proc.pid)) and len(pids) == 2 and http_up(url) == 2):
                time.sleep(0.05)
            back = time.monotonic()
            recorder.stop()
        finally:
            stop(proc, 30)
    answers = Counter(s for t, s in recorder.answers if killed <= t < back)
    probes = Counter(s for t, s in recorder.probes if killed <= t < back)

    def show(c: Counter[str]) -> str:
        return ", ".join(f"{n:,} × {k}" for k, n in sorted(c.items()))

    return f"| {label} | {back - killed:.1f} | {show(answers)} | {show(probes)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--baseline", type=Path, help="another checkout, run the same way first")
    args = parser.parse_args()
    rows = []
    if args.baseline is not None:
        rows.append(
            run(f"baseline ({args.baseline})", args.baseline, args.checkpoint_dir.resolve(), args.clients)
        )
    rows.append(run("this checkout", REPO, args.checkpoint_dir.resolve(), args.clients))
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.clients} /sentiment clients"
    )
    print("| server | SIGKILL -> 2 HTTP processes up, s | /sentiment answers meanwhile | /ready meanwhile |")
    print("|---|---:|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

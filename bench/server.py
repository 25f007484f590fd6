"""The server in a subprocess on a free 127.0.0.1 port: the load benchmark's (`serve`), and the one the TCP
tests (tests/app/test_server.py), the browser tests (tests/e2e) and the image-command tests (tests/deploy)
start with the same helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_cmd(port: int) -> list[str]:
    """`python -m app` (the service's entry, with its connection limits) on 127.0.0.1:port; no access log
    (APP_ACCESS_LOG's default): callers pipe its output and read it only at exit, so /ready polls must not
    fill the pipe. The command sets APP_HOST and APP_PORT over the caller's environment."""
    return ["env", "APP_HOST=127.0.0.1", f"APP_PORT={port}", sys.executable, "-m", "app"]


def uvicorn_cmd(port: int) -> list[str]:
    """A bare uvicorn serving create_app() on 127.0.0.1:port, without the connection limits of
    app/edge/connections.py: only bench/slow_clients.py's `no-limits` comparison runs it."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "app.main:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
    ]


def server_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without its APP_* settings (the caller's own must not leak in), plus env."""
    return {k: v for k, v in os.environ.items() if not k.startswith("APP_")} | env


def code_path(tree: Path) -> str:
    """PYTHONPATH for a server of checkout `tree`: its code first, then this process's other entries (e.g.
    packages installed with pip --target on a GPU machine), never this checkout's."""
    here = {str(REPO), "."}
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in here]
    return os.pathsep.join([str(tree), *rest])


def wait_ready(
    proc: subprocess.Popen,
    url: str,
    timeout: float = 60.0,
    output: Callable[[], str] | None = None,
    graphs: bool = True,
) -> float:
    """Poll GET {url}/ready until 200 -> seconds waited. RuntimeError with the server's output (`output()`, or
    its piped stdout) if it exits first or is not ready within `timeout`. graphs: then wait (not counted)
    until GET /models lists no model whose graphs are still being built (APP_TORCHSCRIPT_AFTER_READY): a
    measurement starts on the server's steady state."""

    def tail() -> str:
        if output is not None:
            return output()
        return proc.stdout.read() if proc.stdout is not None and proc.poll() is not None else ""

    start = time.monotonic()
    # one client for every poll: a new one per poll builds an SSL context (~50 ms of CPU), taken from the
    # server that is starting beside it
    with httpx.Client(timeout=1) as client:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{tail()}")
            last = "no answer"
            try:
                r = client.get(f"{url}/ready")
                if r.status_code == 200:
                    ready = time.monotonic() - start
                    if graphs:
                        _wait_graphs(client, url, start + timeout)
                    return ready
                last = f"{r.status_code} {r.text}"
            except httpx.TransportError as e:
                last = repr(e)
            if time.monotonic() - start > timeout:
                # what /ready said last, and the server's log so far where it has one (`output`)
                log = output() if output is not None else ""
                raise RuntimeError(f"{url} not ready after {timeout:.0f} s; /ready: {last}\n{log}")
            time.sleep(0.05)


def _wait_graphs(client: httpx.Client, url: str, end: float) -> None:
    """Until GET /models lists no graphs pending or building (or answers no list: another server)."""
    while (r := client.get(f"{url}/models")).status_code == 200:
        states = [m.get("graphs") for m in r.json().get("models", [])]
        if not {"pending", "building"} & set(states):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"{url}: graphs still being built: {r.text}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> str:
    """SIGTERM (a graceful shutdown), SIGKILL only if it has not exited after `timeout` s -> its piped
    output (the pipe is closed; "" when the output was not piped)."""
    return stop_all([proc], timeout)[0]


def stop_all(procs: list[subprocess.Popen], timeout: float = 20.0) -> list[str]:
    """`stop` for each, their graceful shutdowns side by side: SIGTERM to every one first, then SIGKILL to any
    that has not exited `timeout` s later -> their piped outputs."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    outputs = []
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is None:
            outputs.append("")
            continue
        with proc.stdout:
            out = proc.stdout.read()
        outputs.append(out.decode(errors="replace") if isinstance(out, bytes) else out)
    return outputs


@contextmanager
def serve(checkpoint_dir: Path, env: dict[str, str]) -> Iterator[tuple[str, float, int]]:
    """`python -m app` in a subprocess -> (base url, seconds from spawn to /ready 200, pid); SIGTERM at exit."""
    with serve_many(checkpoint_dir, [env]) as [server]:
        yield server


@contextmanager
def serve_many(
    checkpoint_dir: Path, envs: list[dict[str, str]], side_by_side: bool = False, cwd: Path = REPO
) -> Iterator[list[tuple[str, float, int]]]:
    """A `serve` per env -> [(base url, seconds from spawn to /ready 200, pid)], all SIGTERMed at once at
    exit. One after the other (each /ready time taken while the ones before it sit idle), or `side_by_side`:
    all spawned, then each waited for (sooner ready, but on a machine the others are loading too). `cwd`:
    the checkout whose code serves."""
    procs: list[subprocess.Popen] = []
    servers: list[tuple[str, float, int]] = []
    with ExitStack() as logs:
        try:
            waiting = []
            for env in envs:
                log = logs.enter_context(tempfile.TemporaryFile())
                waiting.append(_spawn(checkpoint_dir, env, log, cwd))
                procs.append(waiting[-1][0])
                if not side_by_side:
                    servers.append(_wait(*waiting.pop()))
            servers += [_wait(*w) for w in waiting]
            yield servers
        finally:
            stop_all(procs, timeout=30)


def _spawn(
    checkpoint_dir: Path, env: dict[str, str], log: IO[bytes], cwd: Path
) -> tuple[subprocess.Popen, str, float, Callable[[], str]]:
    """`python -m app` on a free port, its output to `log` -> (process, url, spawn time, output so far)."""
    port = free_port()
    base = {"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning"}

    def output() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")

    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app"], env=server_env(base | env), cwd=cwd, stdout=log, stderr=log
    )
    return proc, f"http://127.0.0.1:{port}", start, output


def _wait(
    proc: subprocess.Popen, url: str, start: float, output: Callable[[], str]
) -> tuple[str, float, int]:
    wait_ready(proc, url, 120, output)
    return url, time.monotonic() - start, proc.pid

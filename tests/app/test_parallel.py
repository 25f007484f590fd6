"""python -m app with two HTTP processes and two model processes (APP_MODEL_PROCESSES=2, one with one model
process) against one process: the same answers, global limits, one readiness, one /metrics, request ids in
every process's logs, an HTTP process's restart, and SIGTERM draining every process (a model process's
restart, and the stop when they keep dying: test_process_faults.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from app.core.settings import REPO_ROOT, torch_gpu_build
from app.core.settings.machine import cuda_driver_devices
from bench.scale import process_tree
from bench.server import free_port, server_env, stop, wait_ready

pytestmark = pytest.mark.slow  # starts python -m app: not in `make test-fast`


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def pids(self, role: str) -> list[int]:
        """The pids of this server's `role` processes (http, engine)."""
        out = []
        for pid in process_tree(self.proc.pid)[1:]:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"app.parallel.{role}".encode() in cmd:
                out.append(pid)
        return out

    def engine(self, index: int) -> int:
        """The pid of model process `index` (its argument after the metrics directory)."""
        for pid in self.pids("engine"):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:  # exited since pids() listed it
                continue
            # a process killed and not yet reaped (a zombie) has an empty command line
            if len(cmd) >= 3 and cmd[-3] == str(index).encode():
                return pid
        raise AssertionError(f"no model process {index}")


@contextmanager
def serve(checkpoint_dir: Path, ready: bool = True, **env: str) -> Iterator[Server]:
    """python -m app on `checkpoint_dir` with `env`, once /ready says 200 (ready=False: once started)."""
    port = free_port()
    base = {"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_PORT": str(port), "APP_LOG_LEVEL": "warning"}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app"], env=server_env(base | env), cwd=REPO_ROOT, stdout=log, stderr=log
        )
        server = Server(f"http://127.0.0.1:{port}", proc, log)
        try:
            if ready:
                wait_ready(proc, server.url, 120, server.output)
            yield server
        finally:
            stop(proc, timeout=30)


def eventually(condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll `condition` until it returns something truthy (-> it); AssertionError after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


# the process layer is what these compare, not TorchScript (tests/model and the in-process API tests serve
# it): eager in both, so that no model process traces every model at start
EAGER = {"APP_TORCHSCRIPT": "false"}


@pytest.fixture(scope="module")
def one(app_checkpoint_dir: Path) -> Iterator[Server]:
    with serve(app_checkpoint_dir, APP_HTTP_WORKERS="1", APP_MODEL_PROCESSES="1", **EAGER) as server:
        yield server


def still_running(server: Server) -> Server:
    """A module's server, for one more test: the test that stops it must be the last one to use it."""
    code = server.proc.poll()
    assert code is None, f"the module's server has exited ({code}): the test that stops it must come last"
    return server


@pytest.fixture(scope="module")
def two_server(app_checkpoint_dir: Path) -> Iterator[Server]:
    env = {"APP_LOG_LEVEL": "debug", "APP_LOG_FORMAT": "json", "APP_ACCESS_LOG": "true"} | EAGER
    with serve(app_checkpoint_dir, APP_HTTP_WORKERS="2", APP_MODEL_PROCESSES="2", **env) as server:
        yield server


@pytest.fixture
def two(two_server: Server) -> Server:
    return still_running(two_server)


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/sentiment", {"texts": ["a good film", "정말 좋았어요", "the story was boring"]}),
    ("/translate", {"text": "Le chat dort. Il lit.", "source_lang": "fr", "num_hypotheses": 2}),
    ("/translate", {"texts": ["le chien", "la maison"], "source_lang": "auto", "return_scores": True}),
    ("/translate", {"text": "der Hund", "source_lang": "de", "target_lang": "fr", "beam_size": 3}),
    ("/attention", {"model": "translate-fr-en", "text": "Le chat"}),
    ("/attention", {"model": "sentiment-en", "text": "a good film", "layers": [0]}),
    ("/detect", {"texts": ["le chat dort", "the dog sleeps"], "candidates": True}),
    ("/libretranslate/translate", {"q": ["Le chat dort.", "la maison"], "source": "fr", "target": "en"}),
    ("/libretranslate/translate", {"q": "le chien", "source": "auto", "target": "en", "alternatives": 1}),
    ("/libretranslate/detect", {"q": "le chat dort"}),
    ("/sentiment", {"text": ""}),  # 422
    ("/translate", {"text": "hola", "source_lang": "es"}),  # 404
]


def answers(url: str) -> list[tuple[int, Any]]:
    with httpx.Client(base_url=url, timeout=30) as c:
        out: list[tuple[int, Any]] = [
            (r.status_code, r.json()) for r in (c.post(p, json=b) for p, b in REQUESTS)
        ]
        png = c.post("/attention?format=png", json={"model": "translate-fr-en", "text": "Le chat"})
        out.append((png.status_code, png.content))
        for path in ("/models", "/libretranslate/languages", "/libretranslate/frontend/settings", "/ready"):
            r = c.get(path)
            out.append((r.status_code, r.json()))
    return out


@pytest.fixture(scope="module")
def two_answers(two_server: Server) -> list[tuple[int, Any]]:
    """`two`'s answers to every route, asked once: the tests that read them share them."""
    return answers(still_running(two_server).url)


def test_two_http_processes_and_two_model_processes_on_their_cores(two: Server) -> None:
    assert len(two.pids("http")) == 2
    engines = two.pids("engine")
    assert len(engines) == 2
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:  # a core each (disjoint), the HTTP processes on every core
        slices = [os.sched_getaffinity(pid) for pid in engines]
        assert not set.intersection(*slices)
        assert all(os.sched_getaffinity(pid) == set(cores) for pid in two.pids("http"))


def test_answers_are_those_of_one_process(one: Server, two_answers: list[tuple[int, Any]]) -> None:
    theirs, ours = answers(one.url), two_answers
    assert [s for s, _ in ours] == [s for s, _ in theirs]
    for (_, a), (_, b), what in zip(
        ours, theirs, [p for p, _ in REQUESTS] + ["png", "models", "lt", "lt", "ready"], strict=True
    ):
        assert a == b, what
    assert ours[-5][1][:8] == b"\x89PNG\r\n\x1a\n"


def test_http_processes_serve_every_route_without_torch(two: Server, two_answers: object) -> None:
    """Text work only: after every route (two_answers), no HTTP process has torch's library mapped (the
    model process has: the check can see it). Nor has the supervisor, with a torch built for CPUs only or
    where the NVIDIA driver counts the GPUs: it starts the processes without importing it."""

    def torch_mapped(pid: int) -> bool:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()

    assert [torch_mapped(pid) for pid in two.pids("http")] == [False, False]
    assert torch_mapped(two.pids("engine")[0])
    assert torch_mapped(two.proc.pid) is (torch_gpu_build() and cuda_driver_devices() is None)


def test_one_scrape_sums_every_process(two: Server) -> None:
    def count(text: str, line: str) -> float:
        return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line))

    route = 'transformer_serving_http_requests_total{method="POST",route="/sentiment",status="200"}'
    before = count(httpx.get(f"{two.url}/metrics").text, route)
    n = 24

    def one_request(_: int) -> int:  # a connection each: the kernel hands them to both processes
        return httpx.post(f"{two.url}/sentiment", json={"text": "a good film"}).status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one_request, range(n))) == [200] * n
    text = httpx.get(f"{two.url}/metrics").text
    assert count(text, route) == before + n
    assert count(text, 'transformer_serving_processes{role="http"}') == 2
    assert count(text, 'transformer_serving_processes{role="model"}') == 2
    assert count(text, 'transformer_serving_batch_size_count{model="sentiment-en"}') >= 1  # the model's
    assert text.count("# TYPE transformer_serving_http_requests_total counter") == 1


def test_request_ids_in_every_process_log(two: Server) -> None:
    r = httpx.post(
        f"{two.url}/sentiment", json={"text": "a good film"}, headers={"X-Request-ID": "scale-id-1"}
    )
    assert r.headers["x-request-id"] == "scale-id-1"

    def loggers() -> set[str]:
        lines = [json.loads(ln) for ln in two.output().splitlines() if ln.startswith("{")]
        return {ln["logger"] for ln in lines if ln.get("request_id") == "scale-id-1"}

    found = eventually(lambda: {"app.access", "app.parallel.engine"} <= loggers() and loggers())
    access = [
        json.loads(ln) for ln in two.output().splitlines() if '"scale-id-1"' in ln and "app.access" in ln
    ]
    assert access[0]["model"] == "sentiment-en", found
    assert access[0]["batch_size"] == 1


def test_a_killed_http_process_is_noticed_and_replaced(two: Server) -> None:
    victim = two.pids("http")[0]
    os.kill(victim, signal.SIGKILL)

    def degraded() -> dict[str, Any] | None:  # still ready: the survivor serves (test_process_faults.py)
        r = httpx.get(f"{two.url}/ready")
        return r.json() if r.json().get("reason") else None

    state = eventually(degraded)
    assert state == {"status": "ready", "reason": "1 of 2 HTTP processes up", "models": state["models"]}
    eventually(lambda: "reason" not in httpx.get(f"{two.url}/ready").json())
    pids = two.pids("http")
    assert len(pids) == 2
    assert victim not in pids
    assert f"HTTP process {victim} exited with -9: restarted as" in two.output()
    assert httpx.post(f"{two.url}/sentiment", json={"text": "a good film"}).status_code == 200


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


SLOW = {  # the torch engine: its decoder stops a batch between two steps (a CTranslate2 batch runs to its end)
    "APP_TRANSLATION_ENGINE": "torch",
    "APP_MAX_QUEUE": "3",
    "APP_MAX_BATCH_SIZE": "1",
    "APP_INFERENCE_WORKERS": "1",
    "APP_HTTP_WORKERS": "2",
}
# a tiny translator's slowest request: one long sentence (one queue item), the widest beam, to a long output
# (about 0.3 s on EPYC-Z; beam 8 to 200 tokens took 0.08 s, and under a full suite's load the clients' leaving
# or the third request could come after the decoding had ended)
SLOW_BODY = {
    "text": "le chat " * 60,
    "source_lang": "fr",
    "beam_size": 16,
    "max_length": 500,
    "length_penalty": 0,
}


def test_queue_limits_are_global_and_sigterm_drains_every_process(two_models_dir: Path) -> None:
    with serve(two_models_dir, **SLOW) as server:
        n = 24
        limits = httpx.Limits(max_connections=n)
        with httpx.Client(base_url=server.url, timeout=60, limits=limits) as c, ThreadPoolExecutor(n) as pool:
            # open n connections first (spread over both processes), then send on all at once
            list(pool.map(lambda _: c.get("/health"), range(n)))
            answers = list(pool.map(lambda _: c.post("/translate", json=SLOW_BODY), range(n)))
        full = [r for r in answers if r.status_code == 429]
        assert len(full) + sum(r.status_code == 200 for r in answers) == n
        assert full
        assert all(int(r.headers["retry-after"]) >= 1 for r in full)
        assert all("of 3 items waiting, APP_MAX_QUEUE" in r.json()["detail"] for r in full)  # one limit

        # clients that leave mid-decoding: the model process stops their batch between two steps
        stopped = _metric(server, "transformer_serving_stopped_items_total")
        port = int(server.url.rsplit(":", 1)[1])
        body = json.dumps(SLOW_BODY).encode()
        head = f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        for c in clients:  # one decoding, three queued behind it (APP_MAX_QUEUE)
            c.sendall(head.encode() + body)
        eventually(lambda: "/translate" in _queued(server))
        for c in clients:
            c.close()
        eventually(lambda: _metric(server, "transformer_serving_stopped_items_total") > stopped)
        # their queued items leave the queue too (under load after the decoding stopped): else the next three
        # could meet a full queue (429) and never be queued
        eventually(lambda: not _queued(server))

        # SIGTERM while requests are in flight: they are answered, then every process ends
        children = process_tree(server.proc.pid)[1:]
        # sent at once on connections opened first (one client each would start them seconds apart under
        # load, and the first could be answered before the third came): all three in, one decoding and two
        # queued, before SIGTERM; the drain refuses connections that come after it
        flying = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        for c in flying:
            c.sendall(head.replace("Host: x", "Host: x\r\nConnection: close").encode() + body)
        eventually(lambda: "/translate" in _queued(server, at_least=2))
        server.proc.send_signal(signal.SIGTERM)
        assert [_status(c) for c in flying] == [200] * 3
        assert server.proc.wait(timeout=30) == 0
        assert not any(_alive(pid) for pid in children)


def _queued(server: Server, at_least: int = 1) -> str:
    """The route while at least `at_least` translations wait in the queue (besides the one decoding), else ""."""
    text = httpx.get(f"{server.url}/metrics").text
    depth = [
        ln
        for ln in text.splitlines()
        if ln.startswith('transformer_serving_queue_depth{model="translate-fr-en"}')
    ]
    return "/translate" if depth and float(depth[0].rsplit(" ", 1)[1]) >= at_least else ""


def _status(sock: socket.socket) -> int:
    """The status code of the one answer on `sock` (Connection: close: read to the end), then close it."""
    sock.settimeout(60)
    with sock:
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def _metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name + "{"))

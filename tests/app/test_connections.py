"""Connection limits (app/edge/connections.py) against real `python -m app` subprocesses, with raw sockets: the
deadlines, the head limits, the connection cap and the bounded shutdown. Timeouts are short via settings."""

from __future__ import annotations

import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.__main__ import raise_fd_limit
from app.core.settings import REPO_ROOT, SettingsError
from app.edge.connections import refusal_slots
from bench.server import free_port, server_env, stop, wait_ready

pytestmark = pytest.mark.slow  # starts python -m app: not in `make test-fast`

TCP_LISTEN, TCP_CLOSE_WAIT = "0A", 0x08  # /proc/net/tcp states
PARTIAL_BODY = (
    b"POST /sentiment HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    b'{"text": '
)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@contextmanager
def run_server(checkpoint_dir: Path, **env: str) -> Iterator[Server]:
    """`python -m app` (the image's command) on a free port with APP_* `env`, until /ready is 200."""
    port = free_port()
    base = {"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_PORT": str(port), "APP_LOG_LEVEL": "info"}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app"],
                env=server_env(base | env),
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = Server(proc, port, log)
        try:
            wait_ready(proc, server.url, output=server.output)
            yield server
        finally:
            stop(proc)


@pytest.fixture(scope="module")
def server(sentiment_only_dir: Path) -> Iterator[Server]:
    with run_server(
        sentiment_only_dir,
        # longer than the keep-alive timeout: a partial head pipelined behind an answer is under the head's
        # deadline, which the keep-alive timeout must not cut short
        APP_HEADER_TIMEOUT_S="1.0",
        APP_BODY_TIMEOUT_S="0.5",
        APP_KEEPALIVE_TIMEOUT_S="0.5",
        APP_MAX_HEADER_BYTES="4096",
        APP_MAX_HEADERS="20",
    ) as s:
        yield s


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes -> (bytes, seconds it took); fails if still open."""
    start, data = time.monotonic(), b""
    sock.settimeout(timeout)
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        except TimeoutError:
            pytest.fail(f"still open after {timeout} s; got {data!r}")
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - start


def get(sock: socket.socket, path: bytes = b"/health") -> bytes:
    """GET `path` on a kept-alive connection -> the whole response (head and Content-Length body)."""
    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        body += sock.recv(65536)
    return data


def wait_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Return once condition() holds (polled every 10 ms): a wait for a state, not for a time."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not true within {timeout} s"
        time.sleep(0.01)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (end of stream or reset), without blocking or consuming data."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


def server_ends(server: Server) -> list[tuple[int, int, int]]:
    """The server's side of its TCP connections, from /proc/net/tcp: (client port, TCP state, unread bytes)."""
    ends = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state, queues = line.split()[1:5]
        if int(local.rsplit(":", 1)[1], 16) == server.port and state != TCP_LISTEN:
            ends.append((int(remote.rsplit(":", 1)[1], 16), int(state, 16), int(queues.split(":")[1], 16)))
    return ends


def server_read_all(server: Server, socks: list[socket.socket]) -> bool:
    """Whether the server has taken in everything sent on `socks` (so its parser has seen it)."""
    ports = {sock.getsockname()[1] for sock in socks}
    unread = {port: queued for port, _, queued in server_ends(server) if port in ports}
    return len(unread) == len(ports) and not any(unread.values())


def server_let_go(server: Server) -> bool:
    """Whether the server has closed every connection its clients closed (none left in CLOSE_WAIT)."""
    return all(state != TCP_CLOSE_WAIT for _, state, _ in server_ends(server))


def health_ok(server: Server) -> float:
    """GET /health on a new connection -> seconds; asserts 200."""
    start = time.monotonic()
    r = httpx.get(f"{server.url}/health", timeout=10)
    assert r.status_code == 200, r.text
    return time.monotonic() - start


# --- deadlines ----------------------------------------------------------------------------------------------


def test_idle_new_connection_is_closed_after_the_header_timeout(server: Server) -> None:
    with server.connect() as sock:
        data, took = read_until_closed(sock)
    assert data == b""  # nothing was asked: nothing to answer
    assert 0.4 < took < 5


@pytest.mark.parametrize(
    ("sent", "statuses"),
    [
        pytest.param(b"GET /health HTTP/1.1\r\nHost: t\r\n", [b"408"], id="alone"),
        pytest.param(  # a partial head pipelined behind a request is cut too
            b"GET /health HTTP/1.1\r\nHost: t\r\n\r\nGET /health HTTP/1.1\r\n",
            [b"200", b"408"],
            id="pipelined",
        ),
    ],
)
def test_partial_head_gets_408_after_the_header_timeout(
    server: Server, sent: bytes, statuses: list[bytes]
) -> None:
    with server.connect() as sock:
        sock.sendall(sent)
        data, took = read_until_closed(sock)
    assert re.findall(rb"HTTP/1\.1 (\d+) ", data) == statuses, data
    assert b"APP_HEADER_TIMEOUT_S" in data
    assert 0.4 < took < 5


def test_a_head_sent_in_pieces_within_the_timeout_is_served(server: Server) -> None:
    with server.connect() as sock:
        for piece in (b"GET /hea", b"lth HTTP/1.1\r\nHo", b"st: t\r\n", b"\r\n"):
            sock.sendall(piece)
            wait_until(lambda: server_read_all(server, [sock]))  # the server parses each piece on its own
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")


def test_kept_alive_connection_is_closed_when_idle(server: Server) -> None:
    with server.connect() as sock:
        assert get(sock).startswith(b"HTTP/1.1 200 ")
        assert get(sock).startswith(b"HTTP/1.1 200 ")  # still open: a second request on it
        data, took = read_until_closed(sock)
    assert data == b""
    assert 0.4 < took < 5


def test_stalled_body_gets_408_and_the_server_goes_on(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(PARTIAL_BODY)
        data, took = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"APP_BODY_TIMEOUT_S" in data
    assert 0.4 < took < 5
    r = httpx.post(f"{server.url}/sentiment", json={"text": "a good film"}, timeout=10)
    assert r.status_code == 200
    assert "Traceback" not in server.output()


# --- head limits --------------------------------------------------------------------------------------------


def test_huge_header_is_refused_quickly_while_health_answers(server: Server) -> None:
    """A header sent in 4 KB writes (the issue's 128 MB attack, cut short): 431 after about the limit, at
    almost no CPU, and /health answers meanwhile."""
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    cpu, answer, sent = cpu_s(), b"", 0
    health: list[float] = []
    with server.connect() as sock:
        start = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: ")
        with suppress(OSError):  # the server may reset the connection once it has answered
            while sent < 64 << 20 and not answer:
                sock.sendall(b"a" * 4096)
                sent += 4096
                if select.select([sock], [], [], 0)[0]:
                    answer = sock.recv(1000)
                if sent % (256 << 10) == 0:
                    health.append(health_ok(server))
        took = time.monotonic() - start
        answer = answer or read_until_closed(sock)[0]
    assert answer.startswith(b"HTTP/1.1 431 "), answer
    assert b"APP_MAX_HEADER_BYTES" in answer
    assert took < 3, f"refused after {took:.1f} s and {sent >> 10} KB"
    assert cpu_s() - cpu < 1.0
    assert max(health, default=0) < 2.0  # 1 s in the acceptance; slack for a loaded test machine
    health_ok(server)


def test_too_many_header_fields_get_431(server: Server) -> None:
    head = b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(25)) + b"\r\n"
    with server.connect() as sock:
        sock.sendall(head)
        data, _ = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 431 "), data
    assert b"APP_MAX_HEADERS" in data


def test_long_url_counts_towards_the_head_limit(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(b"GET /health?" + b"q" * 5000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        data, _ = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 431 "), data


def cuts(server: Server, reason: str) -> float:
    """transformer_serving_connections_cut_total{reason} from /metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(rf'^transformer_serving_connections_cut_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_cuts_are_counted_in_metrics(server: Server) -> None:
    before = cuts(server, "too_many_headers")
    with server.connect() as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n" + b"X-A: 1\r\n" * 30 + b"\r\n")
        assert read_until_closed(sock)[0].startswith(b"HTTP/1.1 431 ")
    assert cuts(server, "too_many_headers") == before + 1


def test_head_within_the_limits_is_served(server: Server) -> None:
    headers = {f"x-{i}": "v" * 150 for i in range(15)}  # 18 fields, ~3 KB: under 20 fields and 4096 bytes
    assert httpx.get(f"{server.url}/health", headers=headers, timeout=10).status_code == 200


# --- the connection cap -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def capped(sentiment_only_dir: Path) -> Iterator[Server]:
    # no minimum body rate: the stalled bodies below stay (tests/app/test_slow_bodies.py has them cut)
    env = {"APP_MAX_CONNECTIONS": "16", "APP_BODY_TIMEOUT_S": "30", "APP_MIN_BODY_RATE": "0"}
    with run_server(sentiment_only_dir, **env) as s:
        yield s


def test_idle_connections_past_the_cap_make_room_for_new_ones(capped: Server) -> None:
    base = capped.fds()
    idle = [capped.connect() for _ in range(100)]
    try:
        for _ in range(3):
            health_ok(capped)  # each new connection closes the longest-waiting idle one
        wait_until(lambda: sum(map(closed_by_server, idle)) >= 100 - 16)
        wait_until(lambda: capped.fds() <= base + 16 + 1)
        assert cuts(capped, "evicted") >= sum(map(closed_by_server, idle))
    finally:
        for sock in idle:
            sock.close()


def test_past_the_cap_with_every_connection_busy_probes_pass_and_others_get_503(capped: Server) -> None:
    wait_until(lambda: server_let_go(capped))  # the connections of earlier tests are gone
    busy = [capped.connect() for _ in range(16)]
    try:
        for sock in busy:
            sock.sendall(PARTIAL_BODY)  # a request in progress: never closed to make room
        wait_until(lambda: server_read_all(capped, busy))
        with capped.connect() as sock:
            sock.sendall(b"POST /sentiment HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
            data, _ = read_until_closed(sock)
        assert data.startswith(b"HTTP/1.1 503 "), data
        assert b"APP_MAX_CONNECTIONS" in data
        assert b"retry-after: 1" in data
        for path, status in ((b"/health", b"200"), (b"/ready", b"503")):  # /ready: "saturated"
            with capped.connect() as sock:
                sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
                data, _ = read_until_closed(sock)  # answered, then closed
            assert data.startswith(b"HTTP/1.1 " + status + b" "), data
        with capped.connect() as sock:  # a refused one gets a second for its head
            sock.sendall(b"GET /health HTTP/1.1\r\n")
            data, took = read_until_closed(sock)
        assert data.startswith(b"HTTP/1.1 503 "), data
        assert 0.9 < took < 3
        # refused connections that send nothing wait 1 s at most, and only so many at once
        base = capped.fds()
        waiting = [capped.connect() for _ in range(60)]
        wait_until(lambda: sum(map(closed_by_server, waiting)) >= 60 - refusal_slots(16))  # no slot: closed
        assert capped.fds() <= base + refusal_slots(16)
        wait_until(lambda: all(map(closed_by_server, waiting)), timeout=3)
        assert capped.fds() <= base
        for sock in waiting:
            sock.close()
    finally:
        for sock in busy:
            sock.close()
    wait_until(lambda: server_let_go(capped))  # the busy connections are gone: room again
    r = httpx.post(f"{capped.url}/sentiment", json={"text": "a good film"}, timeout=10)
    assert r.status_code == 200


# --- shutdown -----------------------------------------------------------------------------------------------


def test_sigterm_with_a_half_sent_body_exits_within_the_shutdown_timeout(sentiment_only_dir: Path) -> None:
    with run_server(sentiment_only_dir, APP_SHUTDOWN_TIMEOUT_S="1", APP_BODY_TIMEOUT_S="60") as s:
        stalled, idle = s.connect(), s.connect()
        stalled.sendall(PARTIAL_BODY)
        assert get(idle).startswith(b"HTTP/1.1 200 ")
        wait_until(lambda: server_read_all(s, [stalled]))  # its request is in progress
        s.proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        answers: list[bytes] = []
        reader = threading.Thread(target=lambda: answers.append(read_until_closed(stalled)[0]))
        reader.start()
        assert read_until_closed(idle)[0] == b""  # an idle connection is closed at once
        code = s.proc.wait(timeout=10)
        took = time.monotonic() - start
        reader.join()
        stalled.close()
        idle.close()
        output = s.output()
    assert code in (0, -signal.SIGTERM), output
    assert took < 1 + 5, output  # the timeout, then the lifespan's shutdown (no batch running)
    assert answers[0].startswith(b"HTTP/1.1 503 "), answers
    assert b"APP_SHUTDOWN_TIMEOUT_S" in answers[0]
    assert "Traceback" not in output
    assert "Application shutdown complete" in output


# --- the descriptor limit -----------------------------------------------------------------------------------


def test_fd_limit_is_raised_to_fit_the_cap_or_refused() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 4096:
        pytest.skip(f"needs a finite hard RLIMIT_NOFILE >= 4096, got {hard}")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        assert raise_fd_limit(2048) >= 2048 + 64
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 2048 + 64
        with pytest.raises(SettingsError, match="APP_MAX_CONNECTIONS"):
            raise_fd_limit(hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

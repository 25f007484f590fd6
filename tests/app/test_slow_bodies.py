"""Slow request bodies (issue 29, item 1) against real `python -m app` subprocesses: a body below
APP_MIN_BODY_RATE past APP_BODY_RATE_GRACE_S gets 408; with every connection taken by trickling bodies, fresh
clients are still served (lagging bodies make room) and /ready reports a saturated table."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.test_connections import PARTIAL_BODY, Server, cuts, read_until_closed, run_server

pytestmark = pytest.mark.slow  # starts python -m app: not in `make test-fast`

SLOW_HEAD = (
    b"POST /sentiment HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
)


@pytest.fixture(scope="module")
def rated(sentiment_only_dir: Path) -> Iterator[Server]:
    with run_server(sentiment_only_dir, APP_BODY_RATE_GRACE_S="0.5", APP_BODY_TIMEOUT_S="30") as s:
        yield s


def test_trickling_body_gets_408_after_the_grace_period(rated: Server) -> None:
    before = cuts(rated, "body_too_slow")
    with rated.connect() as sock:
        sock.sendall(PARTIAL_BODY)  # then nothing: far below 240 bytes/s
        data, took = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"APP_MIN_BODY_RATE" in data
    assert 0.4 < took < 5  # the grace period, not APP_BODY_TIMEOUT_S
    assert cuts(rated, "body_too_slow") == before + 1


def test_body_sent_in_pieces_above_the_rate_is_served(rated: Server) -> None:
    body = json.dumps({"text": "a good film " + "a" * 1000}).encode()
    head = b"POST /sentiment HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    with rated.connect() as sock:
        sock.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        for i in range(0, len(body), 100):  # ~1 KB/s over ~1 s: across the grace period, above the rate
            sock.sendall(body[i : i + 100])
            time.sleep(0.1)
        data, _ = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 200 "), data


class Flood:
    """`n` connections each sending SLOW_HEAD and then a body byte every 0.5 s; one the server closes is
    reopened 0.1 s later (the attacker resumes)."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.n = port, n
        self.stop = threading.Event()
        self.open = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _connect(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            sock.sendall(SLOW_HEAD)
        except OSError:
            return None
        sock.setblocking(False)
        return sock

    def _run(self) -> None:
        socks: list[socket.socket | None] = [None] * self.n
        reopen = [0.0] * self.n
        next_byte = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            for i, sock in enumerate(socks):
                if sock is None and now >= reopen[i]:
                    socks[i] = self._connect()
            live = [s for s in socks if s is not None]
            self.open = len(live)
            readable = select.select(live, [], [], 0.05)[0] if live else []
            for sock in readable:  # an answer (408, 503) or a close: the server is done with it
                with_data = b""
                with contextlib.suppress(OSError):
                    with_data = sock.recv(4096)
                if not with_data or with_data.startswith(b"HTTP/"):
                    i = socks.index(sock)
                    sock.close()
                    socks[i], reopen[i] = None, time.monotonic() + 0.1
            if time.monotonic() >= next_byte:
                next_byte += 0.5
                for sock in socks:
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.send(b" ")
        for sock in socks:
            if sock is not None:
                sock.close()


def fresh_post(server: Server) -> int:
    """POST /sentiment on a new connection -> its status (0: no answer)."""
    try:
        return httpx.post(f"{server.url}/sentiment", json={"text": "a good film"}, timeout=5).status_code
    except httpx.HTTPError:
        return 0


@pytest.mark.parametrize("cap", [32])
def test_fresh_clients_are_served_beside_more_slow_bodies_than_the_cap(
    sentiment_only_dir: Path, cap: int
) -> None:
    """The issue's attack at a smaller scale: 300 trickling bodies at a cap of 256 -> 40 at 32. The grace
    period (5 s by default) is not waited for: lagging bodies are closed for new connections."""
    with run_server(sentiment_only_dir, APP_MAX_CONNECTIONS=str(cap), APP_BODY_TIMEOUT_S="30") as s:
        base = s.fds()
        with Flood(s.port, cap + cap // 4) as flood:
            end = time.monotonic() + 10
            while s.fds() < base + cap:  # the table is full of trickling bodies
                assert time.monotonic() < end, f"flood stuck at {flood.open} connections"
                time.sleep(0.01)
            first = time.monotonic()
            while fresh_post(s) != 200:  # a lagging body is closed for a new client (on main: never)
                assert time.monotonic() < first + 5, "no fresh client served while the table is full"
            statuses = [fresh_post(s) for _ in range(60)]
            assert flood.open >= cap // 2  # the attack went on meanwhile
        evicted = cuts(s, "evicted_slow_body")
    assert statuses.count(200) >= 0.9 * len(statuses), statuses
    assert evicted >= 1


def test_ready_reports_a_saturated_table_and_health_stays_up(sentiment_only_dir: Path) -> None:
    """With every connection holding a body that keeps no rate limit (APP_MIN_BODY_RATE=0), nothing can be
    closed: /ready answers 503 "saturated" so that a load balancer sends users elsewhere; /health stays 200."""
    with run_server(sentiment_only_dir, APP_MAX_CONNECTIONS="16", APP_MIN_BODY_RATE="0") as s:
        busy = [s.connect() for _ in range(16)]
        try:
            for sock in busy:
                sock.sendall(PARTIAL_BODY)
            time.sleep(0.3)  # their heads are read (as test_connections.py's cap tests)
            answers = {}
            for path in (b"/ready", b"/health"):
                with s.connect() as sock:
                    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
                    answers[path] = read_until_closed(sock)[0]
        finally:
            for sock in busy:
                sock.close()
    assert answers[b"/ready"].startswith(b"HTTP/1.1 503 "), answers
    assert b'"saturated"' in answers[b"/ready"]
    assert answers[b"/health"].startswith(b"HTTP/1.1 200 "), answers

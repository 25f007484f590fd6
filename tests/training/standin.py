"""A stand-in web server on localhost for the pull tests: fixed answers by path (GET and HEAD), some of them
cut short to play a broken download."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Answer:
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200
    sent: int | None = None  # bytes written before the connection is closed (None: all of them)


@dataclass
class Site:
    base: str  # http://127.0.0.1:PORT
    answers: dict[str, Answer] = field(default_factory=dict)  # path (no query) -> answer
    asked: list[tuple[str, str]] = field(default_factory=list)  # (method, path)


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # Content-Length is what tells a short body from a whole one

    def _answer(self, body: bool) -> None:
        site, path = self.server.site, urlsplit(self.path).path
        site.asked.append((self.command, path))
        answer = site.answers.get(path)
        if answer is None:
            answer = Answer(b'{"error": "not found"}', {"Content-Type": "application/json"}, 404)
        self.send_response(answer.status)
        for k, v in {"Content-Length": str(len(answer.body)), **answer.headers}.items():
            self.send_header(k, v)
        if answer.sent is not None:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(answer.body[: answer.sent])
        if answer.sent is not None:
            self.close_connection = True

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class Server(ThreadingHTTPServer):
    site: Site
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a client that stops reading (a refused download) resets the connection."""


@contextmanager
def serve() -> Iterator[Site]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.site = Site(f"http://127.0.0.1:{srv.server_address[1]}")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.site
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()

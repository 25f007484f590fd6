"""Connection limits for `python -m app`: uvicorn's httptools protocol plus what uvicorn (0.54) lacks.

uvicorn arms its keep-alive timeout only after a response, and checks `limit_concurrency` only once a head is
complete: a connection that never finishes its head holds a descriptor forever. This subclass adds:

- deadlines: the request head within APP_HEADER_TIMEOUT_S of connecting (or of a next request's first byte;
  an idle connection is closed, a partial head gets 408), the whole body within APP_BODY_TIMEOUT_S of the head,
  and at APP_MIN_BODY_RATE bytes/s on average after APP_BODY_RATE_GRACE_S (app/edge/body_rate.py; else 408);
- APP_MAX_HEADER_BYTES and APP_MAX_HEADERS (431), checked before each read reaches the parser: httptools
  concatenates a header split over many reads (`bytes +=` per read, quadratic), uvicorn its URL likewise;
- one write per answer: a response's head goes out with its body (app/edge/held_head.py);
- APP_MAX_CONNECTIONS: past it a new connection closes one that waits for a request (idle or sending its
  head) or whose body lags below APP_MIN_BODY_RATE (408), in the order of IdleConnections.evict; never one whose
  body keeps the rate or whose request is with the app. With none to close it is refused: GET /health is
  answered, /ready gets 503 "saturated" (a load balancer sends users elsewhere), the rest get 503 unless a
  connection can be closed once their head is complete; it has a second to send its head. At most
  `refusal_slots` wait so, more are closed at once: never more than max_connections + refusal_slots
  client sockets;
- on shutdown, a connection waiting for its next request (kept alive, or its head begun) is not closed at
  once, which resets a request already on its way: for DRAIN_IDLE_S it answers 503 with Retry-After and
  Connection: close (the listener is closed: the client retries elsewhere), then closes; requests still
  unanswered just before APP_SHUTDOWN_TIMEOUT_S (uvicorn's timeout_graceful_shutdown) get a 503 and are
  closed.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from app.core.lazy_timer import LazyTimer
from app.core.metrics import Metrics
from app.core.settings import ENV_PREFIX, Settings
from app.edge.body_rate import PRESSURE_GRACE_S, BodyRate
from app.edge.held_head import HeldHead

PROBE_PATHS = frozenset({"/health", "/ready"})  # answered on refused connections too: probes stay truthful
REFUSAL_GRACE_S = 1.0  # a refused connection's time to send its request head (then the 503 can be read)
# at shutdown, requests still unanswered this long before APP_SHUTDOWN_TIMEOUT_S get a 503 and are closed, so
# that their tasks end on a disconnect instead of being cancelled by uvicorn at the timeout
STRAGGLER_MARGIN_S = 0.5
# after an answer given without the app (408, 431, 503), what the client still sends is read and dropped for
# this long before closing: closing with unread data would reset the connection and could destroy the answer
LINGER_S = 1.0
# at shutdown, how long a connection waiting for a request still answers one (503) before it closes: a client
# sends on a kept-alive connection without knowing the server has begun to drain
DRAIN_IDLE_S = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_header_bytes: int
    max_headers: int
    max_connections: int
    shutdown_timeout_s: float
    min_body_rate: float = 0.0  # bytes/s; 0 = none
    body_rate_grace_s: float = 5.0
    answer_half_closed: bool = False

    @classmethod
    def from_settings(cls, s: Settings) -> ConnectionLimits:
        return cls(
            s.header_timeout_s,
            s.body_timeout_s,
            s.max_header_bytes,
            s.max_headers,
            s.max_connections,
            s.shutdown_timeout_s,
            s.min_body_rate,
            s.body_rate_grace_s,
            s.answer_half_closed,
        )


def refusal_slots(max_connections: int) -> int:
    """Refused connections that may wait for their request head at once (past the cap)."""
    return max(16, max_connections // 32)


class Rejected(Exception):
    """Raised from a parser callback: answer `status` with `message` and close."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


class IdleConnections:
    """Per server: the connections that may be closed to make room, oldest first: waiting for a request
    (idle), or receiving a body (closed once it lags); and the count of refused connections waiting to read
    their 503."""

    def __init__(self) -> None:
        # oldest first; an OrderedDict pops its first item in O(1) (a dict scans the slots freed before it).
        # waiting: the loop time each began to wait
        self.waiting: OrderedDict[LimitedHttpToolsProtocol, float] = OrderedDict()
        self.bodies: OrderedDict[LimitedHttpToolsProtocol, None] = OrderedDict()
        self.refused = 0

    def wait(self, conn: LimitedHttpToolsProtocol) -> None:
        self.waiting.pop(conn, None)
        self.waiting[conn] = conn.loop.time()

    def busy(self, conn: LimitedHttpToolsProtocol) -> None:
        self.waiting.pop(conn, None)
        self.bodies.pop(conn, None)

    def body(self, conn: LimitedHttpToolsProtocol) -> None:
        self.waiting.pop(conn, None)
        self.bodies[conn] = None

    def evict(self, now: float) -> str | None:
        """Make room for a new connection -> the reason counted, or None if nothing could be closed. Closed,
        in this order: the connection that has waited longest for a request, if for PRESSURE_GRACE_S (idle,
        or a slow head); else the oldest whose body lags below the minimum rate (a 408); else the one that
        has waited longest, however briefly (a client that has just connected, its head on the way)."""
        if self.waiting and now - next(iter(self.waiting.values())) >= PRESSURE_GRACE_S:
            return self._close_waiting()
        lagging = next((c for c in self.bodies if c.body_lags(now)), None)
        if lagging is not None:
            lagging.cut_body("evicted_slow_body")
            return "evicted_slow_body"
        return self._close_waiting()

    def _close_waiting(self) -> str | None:
        while self.waiting:
            conn, _ = self.waiting.popitem(last=False)
            if not conn.transport.is_closing():
                conn.transport.close()
                return "evicted"
        return None


_idle_connections: weakref.WeakKeyDictionary[ServerState, IdleConnections] = weakref.WeakKeyDictionary()


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HttpToolsProtocol with deadlines, head limits and a connection cap (`limits`, set by
    `protocol_class`)."""

    limits: ClassVar[ConnectionLimits]
    metrics: ClassVar[Metrics | None] = None  # connections_cut{reason} counts what the limits cut

    def __init__(
        self,
        config: Any,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.idle_connections = _idle_connections.setdefault(server_state, IdleConnections())
        # waiting for: a request (idle), the rest of its head, its body, the app's answer
        self.phase: Literal["idle", "head", "body", "app", "closing"] = "idle"
        self.deadline = LazyTimer(self.loop)  # the head's or the body's, or the linger after a refusal
        self.head_begun = False  # a byte of the current request head has arrived
        self.head_bytes = 0  # bytes of whole reads fed while one head was in progress (the parser's buffer)
        self.head_size = 0  # bytes of the URL and complete header fields parsed so far (exact)
        self.head_count = 0
        self.heads = 0  # request heads completed on this connection
        self.refused = False
        self.draining = False  # shut down while waiting for a request: the next one gets a 503
        self.rate = BodyRate(self.limits.min_body_rate, self.limits.body_rate_grace_s)
        self.rate_check = LazyTimer(self.loop)  # when the body may fall below the minimum rate

    # --- connection admission -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # joins server_state.connections
        limits = self.limits
        full = len(self.connections) > limits.max_connections
        evicted = self.idle_connections.evict(self.loop.time()) if full else None
        if evicted == "evicted":  # (a lagging body counted itself)
            self._cut(evicted)
        elif full and evicted is None:
            self._cut("refused")
            if self.idle_connections.refused >= refusal_slots(limits.max_connections):
                transport.close()
                return
            self.refused = True
            self.idle_connections.refused += 1
            self.app = self._refusing_app
        if not self.refused:  # refused ones are not evicted: they get their second to read the 503
            self.idle_connections.wait(self)
        self._arm(REFUSAL_GRACE_S if self.refused else limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline.close()
        self.rate_check.close()
        self.idle_connections.busy(self)
        if self.refused:
            self.refused = False
            self.idle_connections.refused -= 1
        super().connection_lost(exc)

    async def _refusing_app(self, scope: Any, receive: Any, send: Any) -> None:
        """The ASGI app of a connection accepted past the cap: /health is served, /ready answers 503
        "saturated" (no room for a user's request here), the rest get a 503."""
        probe = scope["method"] in ("GET", "HEAD") and scope["path"] in PROBE_PATHS
        if probe and scope["path"] == "/health":
            await self.config.loaded_app(scope, receive, send)
            return
        message = self._too_many()
        body = json.dumps({"status": "saturated", "detail": message}).encode() if probe else _detail(message)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(b"retry-after", b"1"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _cut(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.connections_cut.labels(reason).inc()

    def _too_many(self) -> str:
        limit = self.limits.max_connections
        return f"too many connections: all {limit} ({ENV_PREFIX}MAX_CONNECTIONS) have a request in progress; retry"

    # --- deadlines ------------------------------------------------------------------------------------

    def _arm(self, seconds: float, expired: Any) -> None:
        self.deadline.set_in(seconds, expired)

    def _disarm(self) -> None:
        self.deadline.clear()

    def _head_timed_out(self) -> None:
        if self.transport.is_closing():
            return
        if not self.refused:  # (a refused one was counted as such)
            self._cut("header_timeout")
        if not self.head_begun:  # nothing sent: no request to answer
            self.transport.close()
            return
        if self.refused:
            self._reply(503, self._too_many())
            return
        seconds = self.limits.header_timeout_s
        self._reply(408, f"request headers not received within {seconds:g} s ({ENV_PREFIX}HEADER_TIMEOUT_S)")

    def _body_timed_out(self) -> None:
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # we stopped reading (the app has not taken the body yet): not the client
            self._arm(self.limits.body_timeout_s, self._body_timed_out)
            return
        self.cut_body("body_timeout")

    def cut_body(self, reason: str) -> None:
        """408 for a body that came too slowly (`reason`: body_timeout, body_too_slow, evicted_slow_body)."""
        self._cut(reason)
        self._stop_rate_check()
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            cycle.disconnected = True  # the app's receive() returns http.disconnect, its sends are dropped
            cycle.message_event.set()
            if reason == "body_timeout":
                seconds = self.limits.body_timeout_s
                message = f"request body not received within {seconds:g} s ({ENV_PREFIX}BODY_TIMEOUT_S)"
            else:
                rate, grace = self.limits.min_body_rate, self.limits.body_rate_grace_s
                message = (
                    f"request body sent below {rate:g} bytes/s ({ENV_PREFIX}MIN_BODY_RATE, after "
                    f"{grace:g} s, {ENV_PREFIX}BODY_RATE_GRACE_S"
                    + (", or sooner while every connection is taken)" if reason != "body_too_slow" else ")")
                )
            # closed for a new connection: at once (a second's linger would hold the slot it is freeing)
            self._reply(408, message, linger=0.0 if reason == "evicted_slow_body" else LINGER_S)
        else:
            self.transport.close()

    # --- the minimum body rate ------------------------------------------------------------------------

    def body_lags(self, now: float) -> bool:
        """Below the minimum body rate for a while (closable while the table is full)."""
        return self.phase == "body" and not self.flow.read_paused and self.rate.lagging(now)

    def _start_rate_check(self) -> None:
        self._stop_rate_check()
        self.rate.restart(self.loop.time())
        if self.rate.rate > 0:
            self.rate_check.set(self.rate.due(), self._check_rate)

    def _stop_rate_check(self) -> None:
        self.rate_check.clear()

    def _check_rate(self) -> None:
        """At the time the body would fall below the rate: cut it if it has, else look again when it may."""
        if self.phase != "body" or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:  # the app has not taken the body yet: measure again from now
            self._start_rate_check()
        elif self.rate.too_slow(now):
            self.cut_body("body_too_slow")
        else:
            self.rate_check.set(self.rate.due(), self._check_rate)

    def shutdown(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and self.phase in ("idle", "head") and not self.transport.is_closing():
            # a request may be on its way: answered 503 (_draining_app) until DRAIN_IDLE_S, then closed
            self.app, self.draining = self._draining_app, True
            self.loop.call_later(DRAIN_IDLE_S, self._drained)
            return
        super().shutdown()  # a request in progress: closed once answered
        if not self.transport.is_closing():
            grace = max(0.0, self.limits.shutdown_timeout_s - STRAGGLER_MARGIN_S)
            self.loop.call_later(grace, self._straggler)

    def _drained(self) -> None:
        """DRAIN_IDLE_S after the shutdown: closed, unless a request came meanwhile (closed once answered)."""
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()

    async def _draining_app(self, scope: Any, receive: Any, send: Any) -> None:
        """The ASGI app of a connection whose next request came after the shutdown began: 503, closed."""
        timeout = self.limits.shutdown_timeout_s
        body = _detail(f"the server is shutting down ({ENV_PREFIX}SHUTDOWN_TIMEOUT_S={timeout:g} s): retry")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(b"retry-after", b"1"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _straggler(self) -> None:
        """Still sending its request or waiting for its answer when the shutdown timeout nears: 503, close."""
        if self.transport.is_closing():
            return
        self._cut("shutdown")
        self._disarm()
        if self.cycle is not None and not self.cycle.response_started:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
            timeout = self.limits.shutdown_timeout_s
            message = f"the server is shutting down ({ENV_PREFIX}SHUTDOWN_TIMEOUT_S={timeout:g} s)"
            self._reply(503, message, linger=STRAGGLER_MARGIN_S / 2)  # gone before uvicorn's timeout
        else:
            self.transport.close()

    def _reply(self, status: int, message: str, linger: float = LINGER_S) -> None:
        """Answer without the app (no request to hand it, or a broken one), then close after `linger` s."""
        if self.phase in ("idle", "head") and self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a pipelined head behind an unanswered request: no answer can come first
            return
        body = _detail(message)
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(), b"\r\n"]
        head += [b"connection: close\r\n\r\n", body]
        self.transport.write(b"".join(head))
        self.phase = "closing"
        self._disarm()
        self._stop_rate_check()
        self.idle_connections.busy(self)
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()  # after the answer; the client sees its end and closes
        if linger > 0:
            self._arm(linger, self.transport.close)
        else:
            self.transport.close()

    # --- reading --------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.phase == "closing":
            return
        self._unset_keepalive_if_required()
        head = self.phase in ("idle", "head")
        if head and self.head_bytes > self.limits.max_header_bytes:  # before the parser copies it again
            self._cut("head_too_large")
            self._reply(431, self._too_large())
            return
        heads = self.heads
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()  # served without websockets (ws="none")
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, Rejected):
                self._cut(e.__context__.reason)
                self._reply(e.__context__.status, str(e.__context__))
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if head and self.phase == "head" and self.heads == heads:  # the same head is still in progress
            self.head_bytes += len(data)

    def _too_large(self) -> str:
        limit = self.limits.max_header_bytes
        return f"request line and headers too large: over {limit} bytes ({ENV_PREFIX}MAX_HEADER_BYTES)"

    # parser callbacks (uvicorn's, with the limits checked as each part arrives)
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.phase, self.head_begun = "head", True
        self.head_size = self.head_count = 0
        if not self.deadline.pending:  # a request after a kept-alive answer, or pipelined behind one
            self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        self.head_size += len(url)
        if self.head_size > self.limits.max_header_bytes:
            raise Rejected(431, self._too_large(), "head_too_large")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value) + 4  # ": " and CRLF
        self.head_count += 1
        if self.head_size > self.limits.max_header_bytes:
            raise Rejected(431, self._too_large(), "head_too_large")
        if self.head_count > self.limits.max_headers:
            limit = self.limits.max_headers
            raise Rejected(
                431, f"too many header fields: over {limit} ({ENV_PREFIX}MAX_HEADERS)", "too_many_headers"
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if (
            self.refused and self.idle_connections.evict(self.loop.time()) is not None
        ):  # room now: served after all
            self.refused = False
            self.idle_connections.refused -= 1
            self.app = self.config.loaded_app
        if self.refused:
            self.idle_connections.busy(self)
        else:
            self.idle_connections.body(self)  # closable while the table is full, once its body lags
        self.phase, self.head_begun, self.head_bytes = "body", False, 0
        self.heads += 1
        self._arm(self.limits.body_timeout_s, self._body_timed_out)
        self._start_rate_check()
        super().on_headers_complete()
        self.cycle.transport = HeldHead(self.transport, self.cycle)  # type: ignore[assignment]
        if self.refused or self.draining:
            self.cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        self.rate.received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self.phase == "body":
            self._disarm()
            self._stop_rate_check()
            self.idle_connections.busy(self)
            self.phase = "app"
            if self.cycle.response_complete:  # answered before its body was read (401, 413): idle now
                self._idle()
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts a pipelined request, or arms uvicorn's keep-alive timeout
        if self.phase == "app" and not self.transport.is_closing() and self.cycle.response_complete:
            self._idle()
        elif self.phase == "head" and self.timeout_keep_alive_task is not None:
            # a head pipelined behind this answer is still coming: its deadline rules, not the idle one's
            # (else the keep-alive timeout could close the connection first, with no 408)
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None

    def eof_received(self) -> bool | None:
        """End of the client's input. With APP_ANSWER_HALF_CLOSED, a request with the app still gets its
        answer, then the connection closes (True keeps our side open: a SHUT_WR client). Otherwise it closes
        now, as uvicorn does: the client left, and its work stops (a closed socket and a half-closed one
        cannot be told apart here)."""
        if (
            self.limits.answer_half_closed
            and self.phase == "app"
            and self.cycle is not None
            and not self.cycle.response_complete
        ):
            self.cycle.keep_alive = False
            return True
        return None

    def _idle(self) -> None:
        """Between requests: uvicorn's keep-alive timeout runs; the head deadline starts with a first byte."""
        self.phase = "idle"
        self._disarm()
        self.idle_connections.wait(self)


def _detail(message: str) -> bytes:
    return json.dumps({"detail": message}).encode()


def protocol_class(
    limits: ConnectionLimits, metrics: Metrics | None = None
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, bound to `limits` (and `metrics` to count cuts)."""
    attrs = {"limits": limits, "metrics": metrics}
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), attrs)

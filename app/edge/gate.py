"""The one outer layer: every HTTP request crosses it exactly once, on its way to the lean path or FastAPI.

From the outside in: the request id (X-Request-ID on every answer, app/core/request_id.py: the client's when
sane, else a new one), request metrics and the access line (every answer counted and timed, labelled by route
template), CORS (APP_CORS_ORIGINS; the LibreTranslate API's prefix: open, app/edge/open_cors.py; so that the
answers given here carry its headers too), then the checks that must come before the body is read: what the
headers alone refuse (`_refusal`, one pass over them: two Host headers 400, a declared Content-Length over
APP_MAX_BODY_BYTES 413 (app/edge/body_limit.py; a file upload's route: APP_MAX_FILE_BYTES and its form), a
coded body 415/501; as {"error": ...} under the
LibreTranslate API's prefix), a request for a route that declares API_KEY without the key a 401 (GET /metrics
also takes APP_METRICS_API_KEY, or no key with APP_METRICS_PUBLIC), a Host outside APP_ALLOWED_HOSTS a 400
(app/edge/hosts.py). Then the lean path (app/edge/fastpath.py, APP_FAST_PATH) resolves a JSON POST to its route
function's call, which this layer awaits and sends as JSON, or FastAPI routes the request. A chunked body is counted as it streams
(BodyTooLarge once past the limit), by the lean path's reader or here. An unexpected error becomes a JSON 500
inside CORS (Starlette's own 500 handler runs outside every middleware: a browser page would see a network
error instead).

`GatedFastAPI` is the app itself: it sends each HTTP request straight to the gate once the middleware stack is
built, as Starlette would have (scope["app"], the root path). FastAPI's own outer layers (a check of whether
OpenTelemetry is configured, a few environment lookups; Starlette's call; ServerErrorMiddleware,
ExceptionTelemetryMiddleware, AppBodyLimitMiddleware) do nothing for the gate's requests: it answers every error
that comes before the response has started, and keeps its own body limits. Their frames cost more per request
than the gate itself (BENCHMARKS.md, "The machinery's ceiling"). With OpenTelemetry configured at the first
request, or no gate in the stack, requests take FastAPI's way, so its spans still wrap them.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import ADMIN_UNAUTHORIZED, Forbidden, ServiceError, Unauthorized, error_response
from app.core.logs import log_access
from app.core.metrics import METRICS_PATH, Metrics
from app.core.request_id import CURRENT, RequestInfo
from app.core.settings import ENV_PREFIX, Settings
from app.edge.api_key import ADMIN_PREFIX, authorized, needs_key
from app.edge.body_limit import UPLOAD_SETTING, UPLOAD_SLACK, BodyTooLarge, limited, takes_file
from app.edge.fastpath import JSON, FastPath
from app.edge.hosts import host_refusal
from app.edge.open_cors import OpenCors

REQUEST_ID = b"x-request-id"
MAX_ID_LENGTH = 128
# a client's id is kept when it is 1-128 of these (uuids, trace ids, base64): nothing that could break a log
# line or a header; anything else is replaced by a new id
_SANE_ID = re.compile(rb"[A-Za-z0-9._:+/=@-]{1,%d}" % MAX_ID_LENGTH)
# uuid4's version (4) and variant (RFC 4122) bits, set on 128 random bits as uuid.uuid4() does
_UUID4_KEEP = ~(0xF000 << 64) & ~(0xC000 << 48)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_id() -> str:
    """A new request id: a uuid4 as 32 hex digits, its 122 random bits from `random` (seeded from the OS in each
    process) rather than os.urandom (a system call a request): an id names a request, it guards nothing."""
    return f"{random.getrandbits(128) & _UUID4_KEEP | _UUID4_SET:032x}"


class Gate:
    """Added last with app.add_middleware (so outermost); GatedFastAPI enters it directly. `routes`: the app's,
    read once the routers are in."""

    def __init__(
        self, app: ASGIApp, settings: Settings, metrics: Metrics, routes: Sequence[BaseRoute]
    ) -> None:
        self.app, self.metrics, self.routes = app, metrics, list(routes)
        self.max_body_bytes = settings.max_body_bytes
        # file uploads (routes that declare FILE_UPLOAD): their own limit, FastAPI reads their forms
        self.uploads = [r for r in self.routes if takes_file(r)]
        # their paths, when fixed (no parameters): one set lookup per request, not a route match
        self.upload_paths = {r.path for r in self.uploads if isinstance(r, APIRoute) and "{" not in r.path}
        self.upload_patterns = [r for r in self.uploads if not isinstance(r, APIRoute) or "{" in r.path]
        self.max_upload_bytes = max(self.max_body_bytes, settings.max_file_bytes + UPLOAD_SLACK)
        self.fast = FastPath(app, self.routes, self.max_body_bytes) if settings.fast_path else None
        self.hosts = None if "*" in settings.allowed_hosts else [h.lower() for h in settings.allowed_hosts]
        self.lt_prefix = settings.libretranslate_prefix
        self.access_log = settings.access_log
        self.key, self.metrics_key, self.admin_key = (
            k.get_secret_value().encode() if k is not None else None
            for k in (settings.api_key, settings.metrics_api_key, settings.admin_api_key)
        )
        keyed = [r for r in self.routes if needs_key(r)]
        scrape = [r for r in keyed if getattr(r, "path", None) == METRICS_PATH]
        self.keyed = [r for r in keyed if r not in scrape]
        # /metrics: open with APP_METRICS_PUBLIC or without any key; else either key opens it
        self.scrape = (
            [] if settings.metrics_public or (self.key is None and self.metrics_key is None) else scrape
        )
        self.checked: ASGIApp = self._checked
        # the LibreTranslate API's paths: open CORS, as LibreTranslate (unless APP_LIBRETRANSLATE_CORS=false)
        self.lt_cors = OpenCors(self._checked) if self.lt_prefix and settings.libretranslate_cors else None
        if settings.cors_origins:
            self.checked = CORSMiddleware(
                self._checked,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "X-API-Key", "Content-Type", "X-Request-ID"],
                expose_headers=["X-Request-ID", "Retry-After"],
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500
        given = next((value for name, value in scope["headers"] if name == REQUEST_ID), b"")  # the first
        client = scope.get("client")
        request = RequestInfo(
            given.decode("ascii") if _SANE_ID.fullmatch(given) else new_id(),
            client[0] if client else "",
        )
        token = CURRENT.set(request)  # this task's: the route, the service and the batch queue read it
        request_id = (REQUEST_ID, request.id.encode())

        started = False

        async def send_status(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                message["headers"] = [*message.get("headers", ()), request_id]
            await send(message)

        checked = self.lt_cors if self.lt_cors is not None and self._under_lt(scope) else self.checked
        try:
            await checked(scope, receive, send_status)
        # an error the checks (or CORS) did not answer: the JSON 500, as Starlette's outer layer gave it
        except Exception as exc:
            if started:
                raise
            await error_response(exc, f"{scope['method']} {scope['path']}")(scope, receive, send_status)
        finally:
            seconds, route = time.perf_counter() - start, self._label(scope)
            self.metrics.observe_request(route, scope["method"], status, seconds)
            if self.access_log:
                log_access(request, route, scope["method"], status, seconds)
            CURRENT.reset(token)

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (refused := self._refusal(scope)) is not None:  # 400, 413, 415 or 501
            await self._refuse(refused, scope)(scope, receive, send)
            return
        if self._admin(scope):  # the admin key alone, else 401 (403: no admin API)
            if (refused := self._admin_refusal(scope)) is not None:
                await error_response(refused, "before routing")(scope, receive, send)
                return
        elif (self.key is not None or self.scrape) and not self._allowed(scope):
            await error_response(Unauthorized(), "before routing")(scope, receive, send)
            return
        if self.hosts is not None and (wrong := host_refusal(scope, self.hosts)) is not None:  # 400
            await wrong(scope, receive, send)
            return
        started = False

        async def send_started(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            if self._upload(scope):
                await self.app(scope, limited(receive, self.max_upload_bytes, UPLOAD_SETTING), send_started)
            elif self.fast is None:
                await self.app(scope, limited(receive, self.max_body_bytes), send_started)
            elif (call := await self.fast.prepare(scope, receive, send_started)) is None:
                pass  # FastAPI has answered
            elif call.response is None:  # the function's own Response
                await (await call.answer)(scope, receive, send_started)
            else:
                payload = call.response.dump_json(await call.answer, exclude_none=call.exclude_none)
                headers = [(b"content-type", JSON), (b"content-length", str(len(payload)).encode())]
                await send_started({"type": "http.response.start", "status": 200, "headers": headers})
                await send_started({"type": "http.response.body", "body": payload})
        except Exception as exc:
            if started:  # too late for an error answer: the server closes the connection
                raise
            await error_response(exc, f"{scope['method']} {scope['path']}")(scope, receive, send)

    def _refusal(self, scope: Scope) -> HTTPException | None:
        """The refusal of a request whose headers say its body cannot be read as sent, in this order (one pass
        over the headers):
        - more than one Host header, or one naming several hosts ("a, b"): 400 (RFC 9112 section 3.2;
          proxies and servers that read different ones of the two can be made to disagree about where a
          request goes: request smuggling, cache poisoning); none at all on HTTP/1.1: 400 (the same section);
        - a declared Content-Length over APP_MAX_BODY_BYTES: 413;
        - a Transfer-Encoding other than chunked (RFC 9112: 501; h11 refuses it itself, httptools hands the
          still-coded body on) or a Content-Encoding other than identity (RFC 9110: 415, with Accept-Encoding).
        Each closes the connection: the body is not read."""
        hosts, size, coded = 0, None, None
        lengths, listed = 0, False
        for name, value in scope["headers"]:
            if name == b"host":
                hosts += 1
                listed = listed or b"," in value
            elif name == b"content-length":
                lengths += 1
                size = _length(value) if lengths == 1 else size  # the first one counts
            elif coded is None and name == b"transfer-encoding" and _codings(value) - {"chunked"}:
                coded = HTTPException(
                    501,
                    f"Transfer-Encoding {_shown(value)} is not supported: send the body uncompressed, with "
                    "Content-Length or Transfer-Encoding: chunked",
                    headers={"Connection": "close"},
                )
            elif coded is None and name == b"content-encoding" and _codings(value) - {"identity"}:
                coded = HTTPException(
                    415,
                    f"Content-Encoding {_shown(value)} is not supported: send the body uncompressed",
                    headers={"Accept-Encoding": "identity", "Connection": "close"},
                )
        if hosts > 1:
            return HTTPException(
                400, "more than one Host header: send exactly one (RFC 9112)", headers={"Connection": "close"}
            )
        if listed:
            return HTTPException(
                400, "the Host header names more than one host: send exactly one (RFC 9112)",
                headers={"Connection": "close"},
            )  # fmt: skip
        if hosts == 0 and scope.get("http_version") == "1.1":
            return HTTPException(
                400,
                "no Host header: an HTTP/1.1 request must send one (RFC 9112)",
                headers={"Connection": "close"},
            )
        if size is not None and size > self.max_body_bytes:
            if not self._upload(scope):
                return BodyTooLarge(self.max_body_bytes, size)
            if size > self.max_upload_bytes:
                return BodyTooLarge(self.max_upload_bytes, size, UPLOAD_SETTING)
        return coded

    def _upload(self, scope: Scope) -> bool:
        """Whether routing will serve this request with a file upload route (a POST to one)."""
        if scope["method"] != "POST":
            return False
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):  # routes match without the root path (as Starlette's routing)
            path = path[len(root) :]
        return path in self.upload_paths or any(
            r.matches(scope)[0] is Match.FULL for r in self.upload_patterns
        )

    def _under_lt(self, scope: Scope) -> bool:
        """Whether the path is the LibreTranslate API's."""
        return bool(self.lt_prefix) and str(scope["path"]).startswith(self.lt_prefix + "/")

    def _refuse(self, exc: HTTPException, scope: Scope) -> Response:
        """The answer to a body refused before routing: {"error": ...} under the LibreTranslate API's prefix
        (its clients read that), else the native {"detail": ...}."""
        if self._under_lt(scope):
            return JSONResponse({"error": exc.detail}, exc.status_code, exc.headers)
        return error_response(exc, "before routing")

    def _needs_key(self, scope: Scope) -> bool:
        """Whether routing will serve this request with a route that declares API_KEY (path and method)."""
        return any(route.matches(scope)[0] is Match.FULL for route in self.keyed)

    def _allowed(self, scope: Scope) -> bool:
        """APP_API_KEY opens every route; without it, a route that declares API_KEY is refused, and /metrics
        (unless open) needs APP_METRICS_API_KEY."""
        if self.key is not None and authorized(scope, self.key):
            return True
        if self.key is not None and self._needs_key(scope):
            return False
        if any(route.matches(scope)[0] is Match.FULL for route in self.scrape):
            return self.metrics_key is not None and authorized(scope, self.metrics_key)
        return True

    @staticmethod
    def _admin(scope: Scope) -> bool:
        """Whether the path, below the root path (routes match without it), is the admin API's."""
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return path.startswith(ADMIN_PREFIX)

    def _admin_refusal(self, scope: Scope) -> ServiceError | None:
        """The admin API: off (403) without APP_ADMIN_API_KEY; 401 without that key (APP_API_KEY does not
        open it)."""
        if self.admin_key is None:
            return Forbidden(
                f"the admin API is off: set {ENV_PREFIX}ADMIN_API_KEY to manage models while serving"
            )
        if not authorized(scope, self.admin_key):
            return Unauthorized(ADMIN_UNAUTHORIZED)
        return None

    def _label(self, scope: Scope) -> str:
        """The route template of a routed request; before or without routing the first route whose path
        matches; else "unmatched" (raw paths never become labels)."""
        if (path := getattr(scope.get("route"), "path", None)) is not None:
            return str(path)
        for route in self.routes:
            if route.matches(scope)[0] is not Match.NONE:
                return str(getattr(route, "path", "unmatched"))
        return "unmatched"


def _length(value: bytes) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _codings(value: bytes) -> set[str]:
    return {c.strip().lower() for c in value.decode("latin-1").split(",") if c.strip()}


def _shown(value: bytes, limit: int = 40) -> str:
    text = value.decode("latin-1").strip()
    return text if len(text) <= limit else text[:limit] + "…"


# --- the app that enters at the gate ---------------------------------------------------------------

MAX_DEPTH = 16  # layers searched for the gate below the stack's top


class GatedFastAPI(FastAPI):
    """FastAPI, its HTTP requests sent to the gate among its middleware once the stack is built."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.found = False  # whether the first HTTP request has looked for the gate
        self.gate: Gate | None = None  # None: FastAPI's own way

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # (not lifespan; this app has no websockets)
            if not self.found:
                self.gate, self.found = self._gate(), True
            if (gate := self.gate) is not None:
                if self.root_path:
                    scope["root_path"] = self.root_path
                scope["app"] = self
                await gate(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _gate(self) -> Gate | None:
        """The gate, found below FastAPI's own layers; None when telemetry is on (its spans wrap every
        request) or the stack has no gate."""
        if self._native_telemetry.enabled():
            return None
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        layer: Any = self.middleware_stack
        for _ in range(MAX_DEPTH):
            if isinstance(layer, Gate):
                return layer
            layer = getattr(layer, "app", None)
        return None

"""The app whose HTTP requests enter at the gate (app.edge.gate.Gate) directly.

FastAPI hands each request through its own outer layers before the user middleware: a check of whether
OpenTelemetry is configured (a few environment lookups), Starlette's call, ServerErrorMiddleware,
ExceptionTelemetryMiddleware and AppBodyLimitMiddleware. For the gate's requests they do nothing: the gate
answers every error that comes before the response has started, and the body limits are its own. Their
frames, per request, cost more than the gate itself (BENCHMARKS.md, "The machinery's ceiling").

`GatedFastAPI` sends an HTTP request straight to the gate, once its stack is built, as Starlette would have
(scope["app"], the root path). With OpenTelemetry configured at the first request, with no gate in the
stack, and for lifespan, requests take FastAPI's own way.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from app.edge.gate import Gate

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

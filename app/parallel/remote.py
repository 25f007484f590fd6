"""The service of an HTTP process: what the routes call (app.service.Serving), answered by the model
process's one Service.

Routing metadata (the registry read from the configs, without weights) and language detection are local:
both are pure text work, and /detect and the LibreTranslate API read them. Everything that touches a model,
a queue or a limit (every task's `answer`) is one call to the model process, so the admission and
queue limits are those of one server whatever the number of HTTP processes. Readiness and the model list are
pushed by the model process when they change (the routes read them without waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from prometheus_client.metrics_core import Metric

from app.batching.wait import Disconnected
from app.core.errors import Unavailable
from app.core.limits import Limits
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.parallel.channel import Channel, ChannelClosed
from app.parallel.merge import count_process
from app.registry import Registry
from app.schemas import ModelInfo, Readiness
from app.service import detect_texts
from app.text.langid import Detection, LanguageDetector

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 60.0  # the model process listens within a second or two of its start; this is a bound


class RemoteService:
    def __init__(self, settings: Settings, metrics: Metrics, socket_path: str) -> None:
        self.settings, self.metrics, self.socket_path = settings, metrics, socket_path
        self.limits = Limits(settings)
        self.registry: Registry | None = None
        self.detector: LanguageDetector | None = None
        self.status: str = "loading"
        self.reason: str | None = "starting"
        count_process(metrics.registry, "http")
        self.channel: Channel | None = None
        self._reader: asyncio.Task[None] | None = None
        self._state = Readiness(status="loading", reason="connecting to the model process")
        self._models: list[ModelInfo] = []

    async def start(self) -> None:
        """Read the configs (routing), build the language detector, connect and say hello."""
        s = self.settings
        device = s.torch_device()
        dtype = s.torch_dtype(device)
        quantize = s.quantize_mode(device, dtype)
        self.registry = Registry.discover(
            s.check_checkpoint_dir(), device, dtype, quantize, s.origin_order, s.routes
        )
        self.detector = await asyncio.to_thread(LanguageDetector, self.registry.languages)
        reader, writer = await _connect(self.socket_path)
        self.channel = Channel(reader, writer, {"state": self._on_state, "families": self._families})
        self._reader = asyncio.create_task(self.channel.serve(), name="model-process")
        self._reader.add_done_callback(self._on_closed)
        await self._on_state(*await self.channel.call("hello", os.getpid()))

    async def stop(self) -> None:
        self.status, self.reason = "shutting_down", "the server is shutting down"
        if self.channel is not None:
            self.channel.note("bye")  # not a death: the server is shutting down
            self.channel.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    # --- what the routes call ------------------------------------------------------------------------

    async def answer(self, task: str, req: Any, disconnected: Disconnected = None, **options: Any) -> Any:
        return await self._call("answer", task, req, disconnected=disconnected, **options)

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]:
        return await detect_texts(self.limits, self._ready_detector, texts, field)

    def _ready_detector(self) -> LanguageDetector:
        if self.detector is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=1)
        return self.detector

    async def metrics_text(self) -> bytes:
        """Every process's metrics, summed (the model process asks each HTTP process for its own)."""
        return await self._call("metrics")  # type: ignore[no-any-return]

    def readiness(self) -> Readiness:
        return self._state

    def models(self) -> list[ModelInfo]:
        return list(self._models)

    # --- the channel ---------------------------------------------------------------------------------

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.channel is None:
            raise Unavailable(f"not ready: {self.reason}")
        try:
            return await self.channel.call(method, *args, **kwargs)
        except ChannelClosed:
            raise Unavailable("the model process has gone; the server is restarting or stopping") from None

    async def _on_state(self, state: Readiness, models: list[ModelInfo]) -> None:
        """The model process's readiness (every process's, in fact) and model list."""
        if self.status == "shutting_down":
            return
        self._state, self._models = state, models
        self.status, self.reason = state.status, state.reason

    async def _families(self) -> list[Metric]:
        return list(self.metrics.registry.collect())

    def _on_closed(self, _: asyncio.Task[None]) -> None:
        if self.status != "shutting_down":
            log.error("the model process has gone: not ready")
            self.status, self.reason = "failed", "the model process has gone"
            self._state = Readiness(status="failed", reason=self.reason, models=self._state.models)


async def _connect(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the model process's socket, waiting for it to listen (it starts alongside us)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + CONNECT_TIMEOUT_S
    while True:
        try:
            return await asyncio.open_unix_connection(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if loop.time() > end:
                raise
            await asyncio.sleep(0.05)

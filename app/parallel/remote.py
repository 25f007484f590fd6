"""The service of an HTTP process: what the routes call (app.service.Serving), answered by the model
process's one Service.

Routing metadata (the registry read from the configs, without weights) and language detection are local:
both are pure text work, and /detect and the LibreTranslate API read them. A task that `splits`
(app/tasks/task.py; /sentiment) runs its whole `answer` here, on the text halves of its handlers
(tokenizers, results): validation, routing and tokenizing before, the response after; its batch items alone
cross as one `submit` call (task name, per job the model, batch key and items, the deadline), and its
outputs come back (e.g. class probabilities). The other tasks' `answer` is one call to the model process.
Either way everything that touches a queue or an admission limit runs in the model process, so those limits
are one server's whatever the number of HTTP processes. Readiness and the model list are
pushed by the model process when they change (the routes read them without waiting).

The deadline holds here too: the model process answers 504 at APP_REQUEST_TIMEOUT_S; if it has not answered
DEADLINE_MARGIN_S later (stopped, deadlocked, stuck in a driver call), this process answers 504 itself and
cancels the call, so the model process drops the work when it runs again. A model process silent for STALL_S
(no heartbeat, app/parallel/heartbeat.py) makes /ready 503, and /metrics answers with this process's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any, TypeVar

from prometheus_client.metrics_core import Metric

from app.batching.wait import Disconnected
from app.core.errors import DeadlineExceeded, Unavailable
from app.core.limits import Limits
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.parallel.channel import Channel, ChannelClosed
from app.parallel.heartbeat import DEADLINE_MARGIN_S, STALL_S
from app.parallel.merge import METRICS_TIMEOUT_S, count_process, render
from app.registry import Registry
from app.schemas import ModelInfo, Readiness
from app.service import TaskContext, detect_texts
from app.tasks.served import default_tasks
from app.tasks.task import Job, Task
from app.text.langid import Detection, LanguageDetector

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 60.0  # the model process listens within a second or two of its start; this is a bound
METRICS_WAIT_S = METRICS_TIMEOUT_S + 1.0  # the model process waits METRICS_TIMEOUT_S for each HTTP process
T = TypeVar("T", bound=Task)


class RemoteService(TaskContext):
    """tasks: those whose `answer` may run here (default_tasks() unless given); only those that `splits` do,
    the others (and any the model process serves beyond them) are answered there whole."""

    def __init__(
        self, settings: Settings, metrics: Metrics, socket_path: str, tasks: Sequence[Task] | None = None
    ) -> None:
        self.settings, self.metrics, self.socket_path = settings, metrics, socket_path
        every = default_tasks() if tasks is None else tasks
        self.tasks = {t.name: t for t in every if t.splits}  # their handlers: text halves (load_text)
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
        await asyncio.to_thread(self._load_text, self.registry)
        reader, writer = await _connect(self.socket_path)
        handlers = {"state": self._on_state, "families": self._families, "alive": self._alive}
        self.channel = Channel(reader, writer, handlers)
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

    def _load_text(self, registry: Registry) -> None:
        """The text half of each splitting task's handler of each model it serves."""
        for task in self.tasks.values():  # not `prepare`: what the models load with is not needed here
            for entry in registry.entries.values():
                if task.serves(entry):
                    task.handlers[entry.name] = task.load_text(entry)

    # --- what the routes call ------------------------------------------------------------------------

    async def answer(self, task: str, req: Any, disconnected: Disconnected = None, **options: Any) -> Any:
        if (local := self.tasks.get(task)) is not None:
            return await local.answer(self, req, disconnected, **options)
        return await self._work("answer", task, req, disconnected=disconnected, **options)

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]:
        return await detect_texts(self.limits, self._ready_detector, texts, field)

    def _ready_detector(self) -> LanguageDetector:
        if self.detector is None:
            raise Unavailable(f"not ready: {self.reason}", retry_after=1)
        return self.detector

    async def metrics_text(self) -> bytes:
        """Every process's metrics, summed (the model process asks each HTTP process for its own); this
        process's own gauges only when the model process is silent or does not answer within METRICS_WAIT_S:
        one process's counter is below the server's sum, and Prometheus would read the fall as a reset."""
        if self._silent_for() is None:
            try:
                async with asyncio.timeout(METRICS_WAIT_S):
                    return await self._call("metrics")  # type: ignore[no-any-return]
            except (TimeoutError, Unavailable):
                pass
        log.warning("/metrics: the model process did not answer; this HTTP process's gauges only")
        own = [family for family in await self._families() if family.type not in ("counter", "histogram")]
        return render(own)

    def readiness(self) -> Readiness:
        """The model process's last word; 503 ("failed") while it has been silent for STALL_S."""
        if (silent := self._silent_for()) is not None and self._state.status == "ready":
            reason = f"the model process has not answered for {silent:.1f} s"
            return Readiness(status="failed", reason=reason, models=self._state.models)
        return self._state

    def models(self) -> list[ModelInfo]:
        return list(self._models)

    # --- what a splitting task's `answer` runs on here (app.tasks.task.Context) ------------------------

    def ready_registry(self) -> Registry:
        """The routing registry while the model process's last word is ready, or shutting down (an HTTP
        process said bye: its service still serves until the HTTP processes have finished); 503 with its
        reason otherwise. A model process that is merely silent still gets the call (504 at the deadline,
        as for the tasks it answers whole)."""
        state = self._state
        if state.status not in ("ready", "shutting_down") or self.registry is None:
            raise Unavailable(
                f"not ready: {state.reason}", retry_after=None if state.status == "failed" else 1
            )
        return self.registry

    async def submit(
        self, jobs: list[Job], deadline: float, disconnected: Disconnected, field: str = "text"
    ) -> list[list[Any]]:
        """Service.submit in the model process (admission, queues, batches): only the jobs' task name,
        models, keys and items cross; each item's outputs come back."""
        wire = [(job.model, job.key, job.items) for job in jobs]
        name = jobs[0].task.name if jobs else ""
        return await self._work("submit", name, wire, deadline, field, disconnected=disconnected)  # type: ignore[no-any-return]

    # --- the channel ---------------------------------------------------------------------------------

    async def _work(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A model call, answered 504 here DEADLINE_MARGIN_S past the deadline whatever the model process does
        (the cancelled call sends CANCEL: its task there is cancelled, its queued items dropped)."""
        # fail fast: a call sent now would outlast the supervisor's kill of a silent model process
        if (silent := self._silent_for()) is not None:
            raise Unavailable(f"the model process has not answered for {silent:.1f} s", retry_after=1)
        timeout_s = self.settings.request_timeout_s
        limit = asyncio.timeout(timeout_s + DEADLINE_MARGIN_S)
        try:
            async with limit:
                return await self._call(method, *args, **kwargs)
        except TimeoutError:
            if not limit.expired():  # raised by the model process's code, not our limit
                raise
            raise DeadlineExceeded.after(timeout_s) from None

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

    async def _alive(self) -> None:
        """The model process's heartbeat: arriving is the message (Channel.last_heard)."""

    def _silent_for(self) -> float | None:
        """Seconds the model process has been silent, once past STALL_S; else None."""
        if self.channel is None or self.channel.closed.done():
            return None
        silent = self.channel.silent_for()
        return silent if silent > STALL_S else None

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

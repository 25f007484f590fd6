"""The routes' one entry: `answer(task name, request)` runs that task's flow (app/tasks/task.py) on the
models its Lifecycle (app/runtime/lifecycle.py) serves, and gives the task what it runs on (the Context): limits,
routing, language detection, and `submit`, which queues its items in their batchers and waits for them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from app.batching.wait import WATCH_AFTER_S, Disconnected
from app.core.errors import ClientDisconnected, DeadlineExceeded
from app.core.limits import Limits
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.schemas import ManagedModel, ModelInfo, Readiness, StoredModel
from app.tasks.served import default_tasks
from app.tasks.task import Job, Task
from app.text.langid import Detection, LanguageDetector

# the model machinery (torch) is imported where a Service is built: an HTTP process never is
if TYPE_CHECKING:
    from app.management.control import Action
    from app.registry import Registry
    from app.runtime.queues import BatcherPool, Queues

T = TypeVar("T", bound=Task)
log = logging.getLogger(__name__)


class InlineWork(NamedTuple):
    """Up to how much work runs on the event loop rather than in a thread (a thread hop costs more)."""

    texts: int
    chars: int


INLINE_DETECT = InlineWork(texts=4, chars=2000)  # a few short texts: detected sooner than a thread hop


async def detect_texts(
    limits: Limits, ready_detector: Callable[[], LanguageDetector], texts: Sequence[str], field: str
) -> list[list[Detection]]:
    """Per text its languages, best first, among those served (the first may be an unserved language the
    text is clearly in; empty when the text has no letters): app.text.langid. Limits as the model routes
    (422 naming `field`); ready_detector: the detector, or 503 before there is one."""
    limits.check_texts(texts, field)
    detector = ready_detector()
    if len(texts) <= INLINE_DETECT.texts and sum(map(len, texts)) <= INLINE_DETECT.chars:
        return [detector.detect(t) for t in texts]
    return await asyncio.to_thread(lambda: [detector.detect(t) for t in texts])


class TaskContext:
    """What a task looks up in either service: its sibling tasks and the request's deadline."""

    settings: Settings
    tasks: dict[str, Task]

    def task(self, kind: type[T]) -> T:
        task = self.tasks[kind.name]
        assert isinstance(task, kind)
        return task

    @staticmethod
    def versions(jobs: list[Job], registry: Registry) -> list[str]:
        """Each job's model@version: of the handler that made its items (what they are batched and sent
        between processes under; Job.version)."""
        entries = registry.entries
        return [f"{j.model}@{entries[j.model].version if j.version is None else j.version}" for j in jobs]

    def deadline(self) -> float:
        """loop.time() is CLOCK_MONOTONIC, one clock for every process of the machine."""
        return asyncio.get_running_loop().time() + self.settings.request_timeout_s


class Service(TaskContext):
    """Every task's flow on the models its Lifecycle serves; `tasks`: default_tasks() unless given;
    detector=False: no language detector at start-up, but at its first use (a model process's); pulls=False:
    APP_MODELS are pulled elsewhere (a model process: app/parallel/engine.py)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        tasks: Sequence[Task] | None = None,
        detector: bool = True,
        pulls: bool = True,
    ) -> None:
        from app.management.control import ModelControl
        from app.runtime.lifecycle import Lifecycle

        self.settings, self.metrics = settings, metrics
        self.limits = Limits(settings)
        self.life = Lifecycle(settings, metrics, default_tasks() if tasks is None else list(tasks), detector)
        self.tasks = {t.name: t for t in self.life.tasks}
        self.ready_registry = self.life.ready_registry  # a task's call goes straight to the lifecycle
        self.control = ModelControl(self.life)  # models loaded, reloaded, unloaded while serving
        self.pulls = pulls  # APP_MODELS pulled here (a model process: the first one alone)
        self._pulls: asyncio.Task[None] | None = None

    # --- the routes' calls ---------------------------------------------------------------------------

    def answer(
        self, task: str, req: Any, disconnected: Disconnected = None, **options: Any
    ) -> Coroutine[Any, Any, Any]:
        """The response of task `task` (its name) to `req`; options: the route's (e.g. png=). The task's own
        coroutine: the route awaits it directly (one frame fewer each time the request resumes)."""
        return self.tasks[task].answer(self, req, disconnected, **options)

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]:
        return await detect_texts(self.limits, self.life.ready_detector, texts, field)

    async def start(self) -> None:
        await self.life.start()
        if self.settings.models and self.pulls:
            self._pulls = asyncio.create_task(self._pull_missing(), name="pull-models")

    async def _pull_missing(self) -> None:
        """APP_MODELS missing from the checkpoint dir: pulled, then loaded once the models on disk are."""
        from app.management.control import manage_here
        from app.management.pulls import pull_missing

        async def load(name: str) -> None:
            await self.life.loaded.wait()
            await manage_here(self.control, "load", name)

        life = self.life
        await pull_missing(
            self.settings.models, self.settings.checkpoint_dir, life.report_pulling, load, life.pull_failed
        )

    async def stop(self) -> None:
        if self._pulls is not None:
            self._pulls.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pulls
        await self.life.stop()

    async def metrics_text(self) -> bytes:
        return await self.life.metrics_text()

    def readiness(self) -> Readiness:
        return self.life.readiness()

    async def manage(self, action: Action, name: str) -> ManagedModel:
        from app.management.control import manage_here

        return await manage_here(self.control, action, name)

    async def stored_models(self) -> list[StoredModel]:
        return await self.control.catalog()

    def models(self) -> list[ModelInfo]:
        return self.life.models()

    @property
    def registry(self) -> Registry | None:
        return self.life.registry

    @property
    def reason(self) -> str | None:
        return self.life.reason

    @property
    def detector(self) -> LanguageDetector | None:
        return self.life.detector

    @property
    def queues(self) -> Queues:
        return self.life.queues

    @property
    def pool(self) -> BatcherPool:
        return self.life.queues.pool

    # --- what a task runs on (app.tasks.task.Context) ------------------------------------------------

    async def submit(
        self,
        jobs: list[Job],
        disconnected: Disconnected,
        field: str = "text",
        *,
        deadline: float | None = None,
    ) -> list[list[Any]]:
        """Enqueue each job's items in its batchers, then wait for all results, the deadline (default:
        APP_REQUEST_TIMEOUT_S from now), or the client leaving (and cancel what is left: the batch loop then
        skips those items). 422 when the request's work exceeds APP_MAX_WORK or a model's queue
        could never hold it."""
        if deadline is None:
            deadline = self.deadline()
        assert self.life.registry is not None  # the task routed its items: the registry is ready
        keyed = [
            j._replace(model=k) for j, k in zip(jobs, self.versions(jobs, self.life.registry), strict=True)
        ]
        futures = self.enqueue(keyed, deadline, field)
        return await wait_all(futures, deadline, disconnected, self.settings.request_timeout_s)

    def enqueue(
        self, jobs: list[Job], deadline: float, field: str = "text"
    ) -> list[asyncio.Future[list[Any]]]:
        """`submit`'s checks and queueing, without the wait (each job's model: its model@version): per job the Future of its items' outputs (the
        model process waits for them without a task: app/parallel/waiting.py). Nothing is queued when a job
        is refused (422, 429)."""
        batchers = [self.life.queues.batcher(job.task, job.model, job.key) for job in jobs]
        queues = [
            (len(job.items), batcher.queue.max_items) for batcher, job in zip(batchers, jobs, strict=True)
        ]
        self.limits.check_jobs(sum(sum(job.costs) for job in jobs), queues, field)
        futures: list[asyncio.Future[list[Any]]] = []
        try:
            for batcher, job in zip(batchers, jobs, strict=True):
                futures.append(batcher.enqueue(job.items, deadline, job.costs))
        except BaseException:
            for f in futures:  # a later job refused (its queue full): the earlier ones' items are skipped
                f.cancel()
            raise
        return futures


async def wait_all(
    futures: list[asyncio.Future[list[Any]]], deadline: float, disconnected: Disconnected, timeout_s: float
) -> list[list[Any]]:
    """Every future's result in order; the first error; 504 past the deadline; ClientDisconnected. The futures
    still pending when it ends are cancelled (a batch loop then skips their items).

    Callbacks (a timer, the disconnect watcher) cancel the combined future: no asyncio.wait per request.
    """
    loop = asyncio.get_running_loop()
    combined: asyncio.Future[Any] = futures[0] if len(futures) == 1 else asyncio.gather(*futures)
    why: list[Exception] = []
    watcher: asyncio.Task[None] | None = None

    def stop(reason: Exception) -> None:
        if not combined.done():
            why.append(reason)
            combined.cancel()

    def timed_out() -> None:
        stop(DeadlineExceeded.after(timeout_s))

    def watch() -> None:
        nonlocal watcher, timer
        assert disconnected is not None
        timer = loop.call_at(deadline, timed_out)  # first: the deadline holds whatever happens next
        watcher = loop.create_task(disconnected())
        watcher.add_done_callback(partial(_on_watcher_done, stop))

    if disconnected is None or deadline <= loop.time() + WATCH_AFTER_S:
        timer = loop.call_at(deadline, timed_out)
    else:
        timer = loop.call_later(WATCH_AFTER_S, watch)
    try:
        result = await combined
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if why and not (task is not None and task.cancelling()):  # the timer or the watcher, not our caller
            raise why[0] from None
        raise
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()
        for f in futures:  # no-op when done
            f.cancel()
    return [result] if len(futures) == 1 else list(result)


def _on_watcher_done(stop: Callable[[Exception], None], watcher: asyncio.Task[None]) -> None:
    """The client left (the watcher finished); a failing watcher is logged, not taken for a disconnect."""
    if watcher.cancelled():
        return
    if (error := watcher.exception()) is not None:
        log.error("disconnect watcher failed", exc_info=error)
        return
    stop(ClientDisconnected())

"""The routes' one entry: `answer(task name, request)` runs that task's flow (app/tasks/task.py) on the
models its Lifecycle (app/lifecycle.py) serves, and gives the task what it runs on (the Context): limits,
routing, language detection, and `submit`, which queues its items in their batchers and waits for them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from app.batching.wait import Disconnected, wait_all
from app.core.limits import Limits
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.schemas import ModelInfo, Readiness
from app.tasks.served import default_tasks
from app.tasks.task import Job, Task
from app.text.langid import Detection, LanguageDetector

# the model machinery (torch) is imported where a Service is built: an HTTP process never is
if TYPE_CHECKING:
    from app.queues import BatcherPool, Queues
    from app.registry import Registry

T = TypeVar("T", bound=Task)
log = logging.getLogger(__name__)


class InlineWork(NamedTuple):
    """Up to how much work runs on the event loop rather than in a thread (a thread hop costs more)."""

    texts: int
    chars: int


INLINE_DETECT = InlineWork(texts=4, chars=2000)  # a few short texts: detected sooner than a thread hop


class Serving(Protocol):
    """What the routes call: Service here, app.parallel.remote.RemoteService in an HTTP process."""

    settings: Settings
    metrics: Metrics

    @property
    def registry(self) -> Registry | None: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def detector(self) -> LanguageDetector | None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def answer(self, task: str, req: Any, disconnected: Disconnected = None, **options: Any) -> Any: ...

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]: ...

    async def metrics_text(self) -> bytes: ...

    def readiness(self) -> Readiness: ...

    def models(self) -> list[ModelInfo]: ...


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

    def deadline(self) -> float:
        """loop.time() is CLOCK_MONOTONIC, one clock for every process of the machine."""
        return asyncio.get_running_loop().time() + self.settings.request_timeout_s


class Service(TaskContext):
    """Every task's flow on the models its Lifecycle serves; `tasks`: default_tasks() unless given;
    detector=False: no language detector at start-up, but at its first use (a model process's)."""

    def __init__(
        self, settings: Settings, metrics: Metrics, tasks: Sequence[Task] | None = None, detector: bool = True
    ) -> None:
        from app.lifecycle import Lifecycle

        self.settings, self.metrics = settings, metrics
        self.limits = Limits(settings)
        self.life = Lifecycle(settings, metrics, default_tasks() if tasks is None else list(tasks), detector)
        self.tasks = {t.name: t for t in self.life.tasks}
        self.ready_registry = self.life.ready_registry  # a task's call goes straight to the lifecycle

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

    async def stop(self) -> None:
        await self.life.stop()

    async def metrics_text(self) -> bytes:
        return await self.life.metrics_text()

    def readiness(self) -> Readiness:
        return self.life.readiness()

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
        futures = self.enqueue(jobs, deadline, field)
        return await wait_all(futures, deadline, disconnected, self.settings.request_timeout_s)

    def enqueue(
        self, jobs: list[Job], deadline: float, field: str = "text"
    ) -> list[asyncio.Future[list[Any]]]:
        """`submit`'s checks and queueing, without the wait: per job the Future of its items' outputs (the
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

"""What a task is: one object per kind of request (sentiment, translation, attention), which the shared
machinery (app/serving/service.py, app/runtime/lifecycle.py, app/runtime/queues.py, app/parallel/) loops over without knowing it.

A task says
- which discovered models it serves (`serves`) and how it loads one of them into a *handler* (`load`: the
  kind that runs it, e.g. torch, CTranslate2 or an Argos package), in an inference worker;
- how a request becomes items and the items' answer (`answer`): validate, route, split, detect, tokenize, and
  after the batches, detokenize and build the response; it submits its items as `Job`s through the `Context`
  the service gives it and never touches a batcher;
- how its items are batched (`batching`): per model and batch key (`Job.key`: what must be equal within a
  batch, e.g. a translation's target language and beam size; None when nothing must), the batcher's name, lane
  and limits.

A handler (app/tasks/handlers.py, attention_maps.py, and the imported kinds ctranslate2.py, argos.py) runs one
batch: `run(items[, key=...][, should_stop=...]) -> outputs` in item order, and optionally `warmup()`, and
`compile()` with `compiled` (a torch handler's TorchScript graphs, which app/runtime/lifecycle.py builds after ready;
`compiled` None: it has none); the key is passed when it is not None. The task prices its items as it makes them (`Job.costs`, from its handler's
`costs`), so the machinery that admits and shares them never calls back into the task per item.

A task that `splits` also gives the text half of a handler (`load_text`: no weights); an HTTP process then
runs its `answer`, and only the items cross to the model process (app/parallel/remote.py), as columns its
`wire` writes and reads (app/tasks/wire.py; without one they cross pickled).

A new task type is one module with a Task subclass, plus its request and response schemas, its route (which
calls `service.answer(task name, body, disconnected)`) and its tests.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeVar

from app.core.limits import Limits
from app.core.settings import Settings
from app.tasks.wire import Wire
from app.text.langid import Detection

if TYPE_CHECKING:
    from app.registry import ModelEntry, Registry
    from model import LoadedModel

log = logging.getLogger(__name__)
Disconnected = Any  # app.batching.wait.Disconnected: an awaitable factory that returns once the client left
T = TypeVar("T", bound="Task")


class Job(NamedTuple):
    """One request's items for one batcher: those of `task`'s handler of `model`, under batch key `key`, and
    each item's work units (what the queue admits and shares turns by). version: of the model whose handler
    made the items; None: the current one when the job is submitted (a task that makes its items and submits
    them without awaiting in between; one that awaits, as attention's, names the version it read)."""

    task: Task
    model: str
    key: Hashable
    items: list[Any]
    costs: list[int]
    version: str | None = None


@dataclass(frozen=True)
class BatchSpec:
    """How a task's items for one model and key are batched (app/runtime/queues.py makes the batcher).

    name: the batcher's (its logs); label: its metrics' model label (None: the model's name); expensive: runs
    in the workers' expensive lane, in batches of at most APP_MAX_BATCH_WORK units; stoppable: `run` takes
    should_stop=; max_batch_size: a fixed size instead of APP_MAX_BATCH_SIZE (1: no waiting for more);
    dynamic: one batcher per request-chosen key, retired when idle, at most APP_MAX_DECODE_QUEUES of them.
    """

    name: str
    label: str | None = None
    expensive: bool = False
    stoppable: bool = False
    max_batch_size: int | None = None
    dynamic: bool = False


class Context(Protocol):
    """What a task's `answer` runs on: the service (app/serving/service.py implements it)."""

    settings: Settings
    limits: Limits

    def ready_registry(self) -> Registry: ...

    def task(self, kind: type[T]) -> T: ...

    def deadline(self) -> float: ...

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]: ...

    async def submit(
        self,
        jobs: list[Job],
        disconnected: Disconnected,
        field: str = "text",
        *,
        deadline: float | None = None,
    ) -> list[list[Any]]:
        """The outputs of each job's items; deadline: `deadline()` when it was taken (default: now)."""


class Task:
    """One kind of request. `name`: its key in the service (routes, the channel between processes, the
    batchers' pool); `handlers`: its handler of each model it serves, filled by app/runtime/lifecycle.py."""

    name: ClassVar[str]
    expensive: ClassVar[bool] = False  # its batches are expensive (see BatchSpec); cheap ones keep a lane
    splits: ClassVar[bool] = False  # its `answer` can run where no model is (see load_text)
    wire: ClassVar[Wire | None] = None  # its items, keys and outputs as columns between processes

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}  # model -> its current version's handler
        self.versions: dict[str, Any] = {}  # model@version -> its handler: those in use (app/management/)
        self.settings: Settings | None = None  # set by prepare

    def install(self, key: str, name: str, handler: Any) -> None:
        """`handler` as the current one of model `name`, and as version `key`'s."""
        self.handlers[name] = self.versions[key] = handler

    def uninstall(self, key: str) -> None:
        """A version no longer in use (its batchers have drained)."""
        self.versions.pop(key, None)

    def serves(self, entry: ModelEntry) -> bool:
        """Whether this task gets a handler of `entry`."""
        raise NotImplementedError

    def prepare(self, settings: Settings, registry: Registry) -> None:
        """At start, once the registry is discovered: the settings the kinds load with (overrides call it)."""
        self.settings = settings

    def load(self, entry: ModelEntry, loaded: LoadedModel | None) -> Any:
        """The handler of `entry` (in an inference worker); `loaded`: its torch weights (None: it has none)."""
        raise NotImplementedError

    def load_text(self, entry: ModelEntry) -> Any:
        """For a task that `splits`: the text half of `entry`'s handler (what `answer` calls on it besides
        `run`: tokenize, costs, results; no weights). An HTTP process (app/parallel/remote.py) runs
        `answer` on these, and only the items of its `Job`s cross to the model process, which batches them
        on the whole handlers."""
        raise NotImplementedError

    def routing(self, settings: Settings, registry: Registry) -> dict[str, str]:
        """Its routing table as the registry is now: a route (e.g. a language pair "fr-en") -> the model that
        answers it (what GET /models and the logs show; empty: the request names its model)."""
        return {}

    def languages(self, settings: Settings, registry: Registry) -> set[str]:
        """The languages its texts may be in (what the language detector ranks)."""
        return set()

    def engine(self, entry: ModelEntry) -> str | None:
        """What runs `entry` for this task (GET /models' "engine"), when not torch."""
        return None

    def batching(self, model: str, key: Hashable) -> BatchSpec:
        return BatchSpec(name=model, expensive=self.expensive)

    async def answer(self, ctx: Context, req: Any, disconnected: Disconnected = None, **options: Any) -> Any:
        """The response to `req` (options: the route's, e.g. the PNG format)."""
        raise NotImplementedError

    async def stop(self) -> None:
        """At shutdown, after the batchers have drained: release what the task holds."""


def compile_or_stay_eager(handler: Any) -> None:
    """handler.compile() as it loads: a graph that fails (its check against eager, a scripting error on
    another torch) leaves the model eager, with the same answers, instead of failing its load; it stays
    `compiled` False, and app/runtime/lifecycle.py tries once more after ready before it says "failed"."""
    try:
        handler.compile()
    except Exception as e:  # noqa: BLE001 (any error of the graph: the eager model still serves)
        log.error("model %s: its graphs failed at load, it runs eager: %s", handler.name, e)

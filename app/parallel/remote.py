"""The service of an HTTP process: what the routes call (app.serving.service.Serving), answered by the model
processes' Services (one, or APP_MODEL_PROCESSES: each request goes to one of them, app/parallel/pool.py).

Routing metadata (the registry read from the configs, without weights) and language detection are local:
both are pure text work, and /detect and the LibreTranslate API read them. A task that `splits`
(app/tasks/task.py; /sentiment, /translate, /attention) runs its whole `answer` here, on the text halves of
its handlers (tokenizers, results): validation, routing and tokenizing before, the response after; its batch
items alone cross as one `submit` call (task name, per job the model, batch key and items, the deadline),
and its outputs come back (e.g. class probabilities). The other tasks' `answer` (a plugin's) is one call to
the model process.
Either way everything that touches a queue or an admission limit runs in the model process, so those limits
are one server's whatever the number of HTTP processes. Readiness and the model list are
pushed by the model process when they change (the routes read them without waiting).

The deadline holds here too: the model process answers 504 at APP_REQUEST_TIMEOUT_S; if it has not answered
DEADLINE_MARGIN_S later (stopped, deadlocked, stuck in a driver call), this process answers 504 itself and
cancels the call, so the model process drops the work when it runs again. A model process silent for STALL_S
(no heartbeat, app/parallel/heartbeat.py) makes /ready 503, and /metrics answers with this process's own.
/ready is 200 once every model process is ready; /metrics sums every process (the first model process
gathers the HTTP processes', this process adds the other model processes').

A model process that dies: the calls it held answer 503 at once (ChannelClosed), it leaves the rotation
(the others serve; with none left, 503), and this process reconnects to the one the supervisor restarts on
the same socket path, with backoff; that one rejoins once it has loaded (ModelPool.join).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client.metrics_core import Metric

from app.batching.wait import Disconnected
from app.core.errors import Conflict, DeadlineExceeded, ServiceError, Unavailable, Unservable
from app.core.limits import Limits
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.parallel.channel import CallExpired, Channel, ChannelClosed
from app.parallel.connect import connect, reconnect
from app.parallel.heartbeat import DEADLINE_MARGIN_S, HEARTBEAT_S, STALL_S
from app.parallel.merge import METRICS_TIMEOUT_S, count_process, merge, render
from app.parallel.pool import ModelPool
from app.registry import ModelEntry, Registry, public_reason, read_entry, split_key
from app.schemas import ManagedModel, ModelInfo, Readiness, StoredModel
from app.serving.service import TaskContext, detect_texts
from app.tasks import routing
from app.tasks.served import default_tasks
from app.tasks.task import Job, Task
from app.text.langid import Detection, LanguageDetector

if TYPE_CHECKING:
    from app.management.control import Action

log = logging.getLogger(__name__)
METRICS_WAIT_S = METRICS_TIMEOUT_S + 1.0  # the model process waits METRICS_TIMEOUT_S for each HTTP process
T = TypeVar("T", bound=Task)


class RemoteService(TaskContext):
    """tasks: those whose `answer` may run here (default_tasks() unless given); only those that `splits` do,
    the others (and any the model process serves beyond them) are answered there whole."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        socket_path: str | Sequence[str],
        tasks: Sequence[Task] | None = None,
    ) -> None:
        self.settings, self.metrics = settings, metrics
        self.socket_paths = [socket_path] if isinstance(socket_path, str) else list(socket_path)
        every = default_tasks() if tasks is None else tasks
        self.every = list(every)  # their routing tables: the languages the detector ranks
        self.tasks = {t.name: t for t in every if t.splits}  # their handlers: text halves (load_text)
        self.limits = Limits(settings)
        self.registry: Registry | None = None
        self.detector: LanguageDetector | None = None
        self.status: str = "loading"
        self.reason: str | None = "starting"
        count_process(metrics.registry, "http")
        self.pool = ModelPool()  # a channel to each model process
        self._readers: list[asyncio.Task[None]] = []  # each channel's serve(), by model process
        self._rejoins: dict[int, asyncio.Task[None]] = {}  # reconnecting to a restarted model process
        self._watchdog: asyncio.Task[None] | None = None  # answers the calls held by a silent model process
        self._state = Readiness(status="loading", reason="connecting to the model process")
        self._models: list[ModelInfo] = []
        self._syncing = asyncio.Lock()  # model changes taken one after the other
        self._syncs = 0  # model changes taken so far
        self._replays: set[asyncio.Task[None]] = set()  # unloads replayed in a restarted model process
        self._state_changed = asyncio.Event()  # set at each new state (_refresh)

    async def start(self) -> None:
        """Read the configs (routing), build the language detector and the tokenizers, connect to every model
        process and say hello. No torch and no device: the model processes resolve those (an HTTP process
        imports no torch at all, and on CUDA touching the driver would cost each process seconds at start)."""
        await asyncio.to_thread(self._load_local)
        for i, (reader, writer) in enumerate(await asyncio.gather(*map(connect, self.socket_paths))):
            self.pool.add(channel := self._channel(i, reader, writer))
            self._readers.append(self._serve(i, channel))
        self._watchdog = asyncio.create_task(self._watch_silence(), name="silence-watch")
        syncs = self._syncs  # a sync that comes while the hellos are answered is newer than their lists
        hellos = await asyncio.gather(*(c.call("hello", os.getpid()) for c in self.pool.channels))
        for i, state in enumerate(hellos):
            # a model process pushes its state to us from our hello on, so a "state" note that came while
            # the other hellos were answered is newer than this reply: the reply must not overwrite it (a
            # model process pushes only changes, and we would keep its stale "1 of 2 HTTP processes up")
            if self.pool.states[i] is None:
                await self._on_state(i, *state)
        # a restarted HTTP process: the models as managed since the server started, not as on disk
        if hellos and hellos[0][1] and self._syncs == syncs:
            await self._sync(
                [(m.name, m.version, m.reason if m.status == "failed" else None) for m in hellos[0][1]]
            )

    def _channel(self, i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Channel:
        handlers = {
            "state": partial(self._on_state, i), "families": self._families, "alive": self._alive,
            "sync": self._sync, "load_pulled": self._load_pulled,
        }  # fmt: skip
        return Channel(reader, writer, handlers)

    def _serve(self, i: int, channel: Channel) -> asyncio.Task[None]:
        task = asyncio.create_task(channel.serve(), name=f"model-process-{i}")
        task.add_done_callback(partial(self._on_closed, i, channel))
        return task

    def _load_local(self) -> None:
        """This process's own start-up work, all text: the routing registry (configs, no weights), the language
        detector, and the text half of each splitting task's handlers."""
        s = self.settings
        registry = Registry.discover(s.check_checkpoint_dir(), None, None, allow_empty=bool(s.models))
        languages = routing.languages(self.every, s, registry)  # none: APP_MODELS to pull into an empty dir
        self.detector = LanguageDetector(languages) if languages else None
        self._load_text(registry)
        self.registry = registry

    async def stop(self) -> None:
        self.status, self.reason = "shutting_down", "the server is shutting down"
        for channel in self.pool.channels:
            channel.note("bye")  # not a death: the server is shutting down
            channel.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        for rejoin in self._rejoins.values():
            rejoin.cancel()
        for reader in self._readers:
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        for task in self.tasks.values():  # what the tasks that ran here hold (e.g. the PNG renderer)
            await task.stop()

    def _load_text(self, registry: Registry) -> None:
        """The text half of each splitting task's handler of each model it serves. A model whose tokenizer
        cannot be loaded (missing, corrupted, or disagreeing with its config.json) fails alone, as in the
        model process (which refuses it too, and says so in /ready): never this process."""
        for task in self.tasks.values():  # not `prepare`: what the models load with is not needed here
            for entry in registry.entries.values():
                if not task.serves(entry) or entry.name in registry.failed:
                    continue
                try:
                    task.install(entry.key, entry.name, task.load_text(entry))
                except (ValueError, OSError) as e:  # CheckpointError, sentencepiece's, a file gone
                    log.error("model %s failed: %s", entry.name, e)
                    reason = public_reason(self.settings.checkpoint_dir, e)
                    routing.fail(self.every, self.settings, registry, entry.name, reason)

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
        """Every process's metrics, summed (the first model process asks each HTTP process for its own,
        and adds the other model processes' that this process asked for); this process's own gauges only
        when a model process is silent, gone or reloading, or does not answer within METRICS_WAIT_S: one
        process's counter is below the server's sum, and Prometheus would read the fall as a reset."""
        if len(self.pool.answering(STALL_S)) == len(self.pool.channels):
            try:
                async with asyncio.timeout(METRICS_WAIT_S):
                    return await self._metrics()
            except (TimeoutError, Unavailable, ChannelClosed):
                pass
        log.warning("/metrics: the model process did not answer; this HTTP process's gauges only")
        own = [family for family in await self._families() if family.type not in ("counter", "histogram")]
        return render(own)

    async def _metrics(self) -> bytes:
        first, *others = self.pool.channels
        if not others:
            return await first.call("metrics")  # type: ignore[no-any-return]
        theirs = await asyncio.gather(*(c.call("model_families") for c in others))
        return await first.call("metrics", merge(theirs))  # type: ignore[no-any-return]

    def readiness(self) -> Readiness:
        """The model processes' last word; 503 ("failed") while every one has been silent for STALL_S; while
        only some are silent, gone or reloading, ready, the reason saying how many answer (the others serve
        their requests)."""
        answering, n = len(self.pool.answering(STALL_S)), len(self.pool.channels)
        if self._state.status != "ready" or answering == n:
            return self._state
        if answering:
            reason = f"{answering} of {n} model processes answering: {self._absent()}"
            return self._state.model_copy(update={"reason": reason})
        return Readiness(status="failed", reason=self._absent(), models=self._state.models)

    def models(self) -> list[ModelInfo]:
        return list(self._models)

    # --- what a splitting task's `answer` runs on here (app.tasks.task.Context) ------------------------

    def ready_registry(self) -> Registry:
        """The routing registry while the model process's last word is ready, or shutting down (an HTTP
        process said bye: its service still serves until the HTTP processes have finished); 503 with its
        reason otherwise. A model process that is merely silent still gets the call (504 at the deadline,
        as for the tasks it answers whole)."""
        state = self._state
        if state.status not in ("ready", "shutting_down") and not _serving(state):
            raise Unavailable(
                f"not ready: {state.reason}", retry_after=None if state.status == "failed" else 1
            )
        assert self.registry is not None  # set before the first state is taken
        return self.registry

    async def submit(
        self,
        jobs: list[Job],
        disconnected: Disconnected,
        field: str = "text",
        *,
        deadline: float | None = None,
    ) -> list[list[Any]]:
        """Service.submit in the model process (admission, queues, batches): only the jobs' task name,
        models, keys, items and their costs cross, and the deadline (default: APP_REQUEST_TIMEOUT_S from
        now); each item's outputs come back."""
        if deadline is None:
            deadline = self.deadline()
        registry = self.ready_registry()  # models as model@version: the model process batches each apart
        wire = [
            (k, j.key, j.items, j.costs) for j, k in zip(jobs, self.versions(jobs, registry), strict=True)
        ]
        name = jobs[0].task.name if jobs else ""
        items = sum(len(job.items) for job in jobs)
        return await self._work("submit", name, wire, deadline, field, items=items, disconnected=disconnected)  # type: ignore[no-any-return]

    # --- the channel ---------------------------------------------------------------------------------

    async def _work(self, method: str, *args: Any, items: int = 1, **kwargs: Any) -> Any:
        """A model call (`items`: what it carries, the model processes' load), answered 504 here
        DEADLINE_MARGIN_S past the deadline whatever the model process does (the cancelled call sends
        CANCEL: its task there is cancelled, its queued items dropped)."""
        # fail fast when no model process answers: a call sent now would outlast the supervisor's kill of a
        # silent one (with several, a silent one is only left out of the rotation: ModelPool.order)
        if not self.pool.answering(STALL_S) and (silent := self._silent()) is not None:
            raise Unavailable(self._silence(*silent), retry_after=1)
        timeout_s = self.settings.request_timeout_s
        expires = asyncio.get_running_loop().time() + timeout_s + DEADLINE_MARGIN_S
        try:
            return await self._call(method, *args, items=items, expires=expires, **kwargs)
        except CallExpired:
            raise DeadlineExceeded.after(timeout_s) from None

    async def _call(self, method: str, *args: Any, items: int = 1, **kwargs: Any) -> Any:
        if not self.pool.channels:
            raise Unavailable(f"not ready: {self.reason}")
        try:
            return await self.pool.call(items, method, *args, stall_s=STALL_S, **kwargs)
        except ChannelClosed:  # it died holding the call, or every one is gone: its restart is under way
            raise Unavailable(
                "the model process has gone; it is restarting: try again", retry_after=1
            ) from None

    async def _on_state(self, i: int, state: Readiness, models: list[ModelInfo]) -> None:
        """Model process `i`'s readiness (with every HTTP process's) and model list; the server's is theirs
        together (ModelPool.state)."""
        if self.status == "shutting_down":
            return
        self.pool.states[i] = (state, models)
        if self.pool.join(i):
            log.warning("the restarted model process has rejoined%s", self.pool.name(i))
            if self.registry is not None and (
                extra := [m.name for m in models if m.name not in self.registry.entries]
            ):
                self._replays.add(task := asyncio.create_task(self._unload_extra(i, extra)))
                task.add_done_callback(self._replays.discard)
        self._refresh()

    async def _unload_extra(self, i: int, names: list[str]) -> None:
        """A restarted model process loaded what the disk holds: the models unloaded since the server
        started are unloaded there again (each HTTP process tries; a second try is a 404 or 409)."""
        channel = self.pool.channels[i]
        for name in names:
            try:
                await channel.call("retire", await channel.call("unload", name))
            except (ServiceError, ChannelClosed) as e:
                log.debug("model %s: not unloaded again in the restarted model process: %s", name, e)
            else:
                log.warning(
                    "model %s: unloaded again in the restarted model process%s", name, self.pool.name(i)
                )

    def _refresh(self) -> None:
        """The server's state from the model processes in the rotation (loading while none is: its restart
        is under way)."""
        if not any(self.pool.joined):
            self._state = Readiness(status="loading", reason=self._absent(), models=self._state.models)
        elif (combined := self.pool.state()) is not None:
            self._state, self._models = combined
        else:
            return
        self.status, self.reason = self._state.status, self._state.reason
        self._state_changed.set()
        if self.registry is not None:  # the model processes' failures route here as there (503 or rerouted)
            for name, reason in (self._state.failed or {}).items():
                if name in self.registry.entries and name not in self.registry.failed:
                    routing.fail(self.every, self.settings, self.registry, name, reason)

    # --- models managed while serving (app/management/) ------------------------------------------------

    async def manage(self, action: Action, name: str) -> ManagedModel:
        """In every model process: each stages the version (loads it beside what it serves) before any
        commits it (serves it, and has every HTTP process switch to it), then each retires the old one. A
        stage that fails anywhere is aborted everywhere: the version served before goes on. The first model
        process goes first: a change of the same model under way (409) or refused there (404, 422) has
        touched none of the others."""
        start = time.perf_counter()
        channels = self._all_answering()
        registry = self.ready_registry()
        before = registry.entries.get(name)
        previous = before.version if before is not None else None
        try:
            if action == "unload":
                await self._unload_everywhere(channels, name)
                return ManagedModel(name=name, action=action, changed=True, previous_version=previous,
                                    seconds=time.perf_counter() - start)  # fmt: skip
            key, changing = await self._stage_everywhere(channels, action, name)
            unchanged = not changing
            olds = await _each(changing, "commit", key)
            await asyncio.gather(*(c.call("retire", old) for c, old in zip(changing, olds, strict=True)))
        except ChannelClosed:  # a model process died meanwhile: its successor loads what the disk holds
            raise Unavailable(f"a model process has gone while model {name} changed: try again") from None
        return ManagedModel(
            name=name, action=action, changed=not unchanged, version=split_key(key)[1],
            previous_version=previous, seconds=time.perf_counter() - start,
        )  # fmt: skip

    async def _stage_everywhere(
        self, channels: list[Channel], action: Action, name: str
    ) -> tuple[str, list[Channel]]:
        """The version staged in every model process (the first alone first) -> its key, and the model
        processes that staged it (the others serve it already); any refusal: the stages done are aborted,
        and it is raised."""
        first, *rest = channels
        outcomes = [await first.call("stage", action, name)]
        outcomes += await asyncio.gather(
            *(c.call("stage", action, name) for c in rest), return_exceptions=True
        )
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        keys = {o[0] for o in outcomes if not isinstance(o, BaseException)}
        if not failed and len(keys) > 1:  # the folder was replaced between two reads
            failed = [Conflict(f"model {name}: its files changed while it was loaded: try again")]
        if failed:
            await asyncio.gather(*(c.call("abort", o[0]) for c, o in zip(channels, outcomes, strict=True)
                                   if not isinstance(o, BaseException) and not o[1]), return_exceptions=True)  # fmt: skip
            raise failed[0]
        return outcomes[0][0], [c for c, o in zip(channels, outcomes, strict=True) if not o[1]]

    async def _unload_everywhere(self, channels: list[Channel], name: str) -> None:
        """Unloaded in every model process, the first alone first (404 or 409 there: nothing changed), then
        each one's version retired; a refusal by another is raised once what was unloaded is retired."""
        first, *rest = channels
        keys = [await first.call("unload", name)]
        keys += await asyncio.gather(*(c.call("unload", name) for c in rest), return_exceptions=True)
        done = [(c, k) for c, k in zip(channels, keys, strict=True) if not isinstance(k, BaseException)]
        await asyncio.gather(*(c.call("retire", k) for c, k in done), return_exceptions=True)
        if errors := [k for k in keys if isinstance(k, BaseException)]:
            log.error(
                "model %s: unloaded in %d of %d model processes: %s", name, len(done), len(keys), errors[0]
            )
            raise errors[0]

    async def _load_pulled(self, name: str) -> None:
        """A model APP_MODELS named, pulled by the first model process: loaded in every process once the
        models on disk are (in every model process)."""
        while not _serving(self._state) and self._state.status != "ready":
            self._state_changed.clear()
            await self._state_changed.wait()
        await self.manage("load", name)

    async def stored_models(self) -> list[StoredModel]:
        return await self._all_answering()[0].call("stored_models")  # type: ignore[no-any-return]

    def _all_answering(self) -> list[Channel]:
        """Every model process's channel: 503 while one is restarting or silent (a change must reach all)."""
        n = len(self.pool.channels)
        if not all(self.pool.joined) or len(self.pool.answering(STALL_S)) != n:
            raise Unavailable(f"a model process is restarting or silent ({self._absent()}): try again")
        return list(self.pool.channels)

    async def _sync(self, served: list[tuple[str, str, str | None]]) -> None:
        """A model process's models (name, version, why it failed or None) after a change: this process routes
        and tokenizes the same from here on (a model new, of a new version or loaded after it failed: its text
        halves, read off the loop; one gone: dropped; one failed: 503 or routed around). Requests under way
        keep the text halves they took. Not cancelled half-way by the model process giving up on the call."""
        await asyncio.shield(self._apply(served))

    async def _apply(self, served: list[tuple[str, str, str | None]]) -> None:
        async with self._syncing:
            self._syncs += 1
            registry = self.registry
            assert registry is not None
            want = {name: (version, reason) for name, version, reason in served}
            for name in [n for n in [*registry.entries, *registry.failed] if n not in want]:
                if (gone := registry.remove(name)) is not None:
                    self._uninstall(gone)
            for name, (version, reason) in want.items():
                had = registry.entries.get(name)
                if reason is not None:
                    if name not in registry.failed:
                        routing.fail(self.every, self.settings, registry, name, reason)
                    continue
                if had is not None and had.version == version and name not in registry.failed:
                    continue
                try:
                    entry, halves = await asyncio.to_thread(self._text_halves, name, version)
                except (ValueError, OSError) as e:  # its tokenizer, as at start: this model fails alone here
                    log.error("model %s failed: %s", name, e)
                    routing.fail(
                        self.every,
                        self.settings,
                        registry,
                        name,
                        public_reason(self.settings.checkpoint_dir, e),
                    )
                    continue
                for task, half in halves.items():
                    task.install(entry.key, name, half)
                registry.install(entry)
                if had is not None and had.key != entry.key:
                    self._uninstall(had, keep=name)
            languages = routing.languages(self.every, self.settings, registry)
            if not languages:
                self.detector = None
            elif self.detector is None or languages != sorted(self.detector.languages):
                self.detector = await asyncio.to_thread(LanguageDetector, languages)

    def _uninstall(self, entry: ModelEntry, keep: str | None = None) -> None:
        """A version's text halves dropped (the model's current ones too, unless `keep`: it has a new one)."""
        for task in self.tasks.values():
            task.uninstall(entry.key)
            if keep is None:
                task.handlers.pop(entry.name, None)

    def _text_halves(self, name: str, version: str) -> tuple[ModelEntry, dict[Task, Any]]:
        """Model `name`'s entry as the model process serves it (its version), and its text halves."""
        entry = read_entry(self.settings.checkpoint_dir / name)
        if entry is None:
            raise Unservable(f"model {name}: its Argos Translate package translates nothing")
        if entry.version != version:  # replaced again since the model process read it: its version's key
            log.warning("model %s: its files changed since the model process loaded them", name)
            entry.version = version
        return entry, {t: t.load_text(entry) for t in self.tasks.values() if t.serves(entry)}

    async def _families(self) -> list[Metric]:
        return list(self.metrics.registry.collect())

    async def _alive(self) -> None:
        """The model process's heartbeat: arriving is the message (Channel.last_heard)."""

    async def _watch_silence(self) -> None:
        """Every HEARTBEAT_S, while another model process answers: the calls waiting on one silent for
        STALL_S are answered 503 at once (and cancelled there, for when it runs again) rather than at their
        deadline, and the others take the new requests (ModelPool.order). With none answering, the calls
        keep their deadline (504): there is nowhere else to send them."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if not self.pool.answering(STALL_S):
                continue
            for i, channel in enumerate(self.pool.channels):
                seconds = channel.silent_for()
                if seconds > STALL_S and not channel.closed.done():
                    error = Unavailable(f"{self._silence(i, seconds)}: try again", retry_after=1)
                    if abandoned := channel.abandon(error):
                        log.error("answered 503 to %d call(s) held by a silent model process%s", abandoned,
                                  self.pool.name(i))  # fmt: skip

    def _absent(self) -> str:
        """Why the first model process out of the rotation is out: gone or reloading, else silent."""
        for i, channel in enumerate(self.pool.channels):
            if not self.pool.joined[i] or channel.closed.done():
                return f"the model process is restarting{self.pool.name(i)}"
        silent = self._silent()
        return self._silence(*silent) if silent else "no model process answers"

    def _silent(self) -> tuple[int, float] | None:
        """(index, seconds) of the model process silent the longest, once past STALL_S; else None."""
        return self.pool.silent(STALL_S)

    def _silence(self, i: int, seconds: float) -> str:
        return f"the model process has not answered for {seconds:.1f} s{self.pool.name(i)}"

    def _on_closed(self, i: int, channel: Channel, _: asyncio.Task[None]) -> None:
        """Model process `i`'s channel has closed (the calls it held have failed: 503): out of the rotation
        until its successor rejoins (the supervisor restarts it, or stops the server)."""
        if self.status == "shutting_down" or self.pool.channels[i] is not channel:
            return
        self.pool.leave(i)
        log.error(
            "the model process has gone: out of the rotation until it is restarted%s", self.pool.name(i)
        )
        self._refresh()
        self._rejoins[i] = asyncio.create_task(self._rejoin(i), name=f"rejoin-model-process-{i}")

    async def _rejoin(self, i: int) -> None:
        """Connect to model process `i`'s successor on its socket path (refused until it listens: tries
        with backoff) and say hello; it joins the rotation once past loading (_on_state)."""
        reader, writer = await reconnect(self.socket_paths[i])
        self.pool.replace(i, channel := self._channel(i, reader, writer))
        self._readers[i] = self._serve(i, channel)
        log.warning("reconnected to the restarted model process%s", self.pool.name(i))
        try:
            state = await channel.call("hello", os.getpid())
        except ChannelClosed:  # gone again: _on_closed rejoins once more
            return
        if self.pool.states[i] is None:  # a "state" note pushed since the hello is newer
            await self._on_state(i, *state)


async def _each(channels: list[Channel], method: str, *args: Any) -> list[Any]:
    """`method` on every model process at once -> their answers; the first error raised once all are in."""
    answers = await asyncio.gather(*(c.call(method, *args) for c in channels), return_exceptions=True)
    if errors := [a for a in answers if isinstance(a, BaseException)]:
        raise errors[0]
    return answers


def _serving(state: Readiness) -> bool:
    """Loading is over for the models on disk, and they serve, as in one process: while some failed
    (APP_STRICT_READINESS: a failed model's requests answer 503 saying why, Registry.check_loaded) or while
    APP_MODELS are being pulled. Not a model process that has gone or is silent: those states name none."""
    if not all(v in ("ready", "failed") for v in state.models.values()):
        return False
    return (state.status == "failed" and bool(state.failed)) or (
        state.status == "loading" and bool(state.pulling)
    )

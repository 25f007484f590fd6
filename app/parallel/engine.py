"""A model process: one Service (models, batchers, inference workers, admission limits, one CUDA context),
answering the HTTP processes over a Unix socket. With several (APP_MODEL_PROCESSES > 1), each runs on its
share (app/parallel/shares.py: its cores or GPU, its part of each admission limit), and the first also
gathers the HTTP processes' metrics.

python -m app.parallel.engine SOCKET_PATH HTTP_WORKERS HEARTBEAT_FD METRICS_DIR INDEX PROCESSES
(started by the supervisor)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from prometheus_client.metrics_core import Metric

from app.core.heap import freeze_startup
from app.core.logs import configure_logging
from app.core.metrics import Metrics
from app.core.settings import Settings, load_settings
from app.management.control import Action, Staged
from app.management.pulls import pull_missing
from app.parallel.channel import Channel, ChannelClosed, Handler, Immediate
from app.parallel.departed import Departed
from app.parallel.heartbeat import HEARTBEAT_S, Beat
from app.parallel.lifeline import die_with_parent
from app.parallel.merge import METRICS_TIMEOUT_S, count_process, merge, render
from app.parallel.shares import model_settings, pinned
from app.parallel.waiting import Deadlines
from app.schemas import ModelInfo, Readiness
from app.serving.service import Service
from app.tasks.task import Job

log = logging.getLogger("app.parallel.engine")  # run as __main__


@dataclass
class Change:
    """What an HTTP process's model changes left to do here: versions staged, versions to retire."""

    staged: set[str] = field(default_factory=set)
    retiring: set[str | None] = field(default_factory=set)


STATE_POLL_S = 0.05  # how often readiness is compared with what the HTTP processes were last told


class Engine:
    """Serves `service` to the HTTP processes; `http_workers` of them must say hello before it is first
    ready; after that it stays ready while at least one is up (one restarting: the others serve)."""

    def __init__(
        self,
        service: Service,
        http_workers: int,
        beat: Beat | None = None,
        departed: Departed | None = None,
        pulls: bool = False,
    ) -> None:
        """pulls: this one pulls APP_MODELS (the first model process), and has an HTTP process load each in
        every process."""
        self.service, self.http_workers, self.beat, self.departed = service, http_workers, beat, departed
        self.pulls = pulls
        count_process(service.metrics.registry, "model")
        self.channels: dict[Channel, int | None] = {}  # -> the pid of its HTTP process once it said hello
        self.pids: dict[Channel, int] = {}  # the same, kept after a bye: its metrics stay counted
        self.scraped: dict[Channel, list[Metric]] = {}  # each HTTP process's families when last asked
        self._told: tuple[Readiness, list[ModelInfo]] | None = None
        self._graphs: dict[str, str] = {}  # the graph states last told (they change after ready)
        self.draining = False  # an HTTP process said bye: the server is shutting down
        self.all_up_once = False  # every HTTP process has said hello at least once
        self.deadlines = Deadlines(service.settings.request_timeout_s)  # of the requests submitted
        self.changes: dict[Channel, Change] = {}  # model changes under way, by the HTTP process ordering them
        self._retirements: set[asyncio.Task[None]] = set()

    async def serve(self, path: str, stop: asyncio.Event) -> None:
        """Start the service, listen on `path` until `stop`, then drain the service (SIGTERM comes after
        the HTTP processes have finished their requests)."""
        await self.service.start()
        listener = _listen(path)
        accepting = asyncio.create_task(self._accept(listener))
        poll = asyncio.create_task(self._push_state())
        pulling = (
            asyncio.create_task(self._pull_missing()) if self.pulls and self.service.settings.models else None
        )
        try:
            await stop.wait()
        finally:
            if pulling is not None:
                pulling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pulling
            poll.cancel()
            accepting.cancel()
            listener.close()
            await self.service.stop()
            for channel in list(self.channels):
                channel.close()

    async def _accept(self, listener: socket.socket) -> None:
        """Each HTTP process's connection, served on a channel whose socket two threads read and write."""
        loop, attending = asyncio.get_running_loop(), set()
        while True:
            sock, _ = await loop.sock_accept(listener)
            attending.add(task := asyncio.create_task(self._connected(sock)))
            task.add_done_callback(attending.discard)

    async def _connected(self, sock: socket.socket) -> None:
        handlers: dict[str, Handler | Immediate] = {
            "answer": _logged(self.service.answer), "submit": Immediate(self._submit),
            "metrics": self._metrics, "model_families": self._own_families,
            "stored_models": self.service.stored_models,
        }  # fmt: skip
        channel = Channel.threaded(sock, handlers)
        for step in ("stage", "abort", "commit", "unload", "retire"):  # a change this HTTP process orders
            handlers[step] = partial(getattr(self, f"_{step}"), channel)
        handlers["hello"] = partial(self._hello, channel)
        handlers["bye"] = partial(self._bye, channel)
        self.channels[channel] = None
        try:
            await channel.serve()
        finally:
            self._leftovers(channel)
            pid = self.channels.pop(channel, None)
            if pid is not None and not self.draining:
                log.warning("HTTP process %d has gone", pid)
            if (hello := self.pids.pop(channel, None)) is not None and self.departed is not None:
                self.departed.add(hello, self.scraped.get(channel))  # its counters stay in the sums
            self.scraped.pop(channel, None)
            self._told = None  # tell the others: one fewer is up

    async def _hello(self, channel: Channel, pid: int) -> tuple[Readiness, list[ModelInfo]]:
        self.channels[channel] = self.pids[channel] = pid
        self.all_up_once |= self._up() == self.http_workers
        self._told = None
        return self.state()

    async def _bye(self, channel: Channel) -> None:
        self.channels[channel] = None
        self.draining = True
        self._told = None

    def state(self) -> tuple[Readiness, list[ModelInfo]]:
        """Readiness of the whole server and the model list."""
        return self.readiness(), self.service.models() if self.service.registry is not None else []

    def readiness(self) -> Readiness:
        """The service's; not ready until every HTTP process has come up once, ready with a reason while
        one is missing after that (it is being restarted: the others serve, and a probe that failed would
        take the whole replica out of rotation); shutting down once one said bye."""
        ready = self.service.readiness()
        if self.draining:
            ready = Readiness(
                status="shutting_down", reason="the server is shutting down", models=ready.models
            )
        if ready.status == "ready" and (up := self._up()) < self.http_workers:
            reason = f"{up} of {self.http_workers} HTTP processes up"
            status = "ready" if self.all_up_once and up else "loading"
            ready = Readiness(status=status, reason=reason, models=ready.models)
        return ready

    def _up(self) -> int:
        return sum(pid is not None for pid in self.channels.values())

    async def _push_state(self) -> None:
        """The state to the HTTP processes when it changes, and a heartbeat every HEARTBEAT_S to them and
        to the supervisor (app/parallel/heartbeat.py), from this event loop: it stops when the loop does."""
        clock = asyncio.get_running_loop().time
        last_beat = clock() - HEARTBEAT_S
        while True:
            graphs = self.service.life.graphs
            if self._told is None or self.readiness() != self._told[0] or graphs != self._graphs:
                self._told = state = self.state()  # the model list changes with these
                self._graphs = dict(graphs)
                for channel, pid in self.channels.items():
                    if pid is not None:
                        channel.note("state", *state)
            if clock() - last_beat >= HEARTBEAT_S:
                last_beat = clock()
                if self.beat is not None:
                    self.beat.beat()
                for channel, pid in self.channels.items():
                    if pid is not None:
                        channel.note("alive")
            await asyncio.sleep(STATE_POLL_S)

    def _submit(
        self, task: str, jobs: list[tuple[str, Hashable, list[Any], list[int]]], deadline: float, field: str
    ) -> list[asyncio.Future[list[Any]]]:
        """The batches of a request whose task's `answer` runs in the HTTP process (RemoteService.submit):
        per job its model, batch key, items and their costs -> per job its items' outputs. Service.submit's admission,
        queues and deadline, as in one process (the deadline: loop.time(), one clock for both processes),
        with no task per request: called as the frame is read (the channel's Immediate, which answers with
        their results), it queues the items and returns their Futures, failed at the deadline here."""
        log.debug("%s batches from an HTTP process", task)  # under the request's id, like `answer`
        owner = self.service.tasks[task]
        futures = self.service.enqueue([Job(owner, *job) for job in jobs], deadline, field)
        return self.deadlines.track(futures, deadline)

    # --- models managed while serving (app/management/; RemoteService.manage orders the steps) ---------

    async def _pull_missing(self) -> None:
        """APP_MODELS missing from the checkpoint dir: pulled here, each then loaded in every process by an
        HTTP process (RemoteService.load_pulled: it reaches every model process)."""
        life, s = self.service.life, self.service.settings
        await pull_missing(
            s.models, s.checkpoint_dir, life.report_pulling, self._load_pulled, life.pull_failed
        )

    async def _load_pulled(self, name: str) -> None:
        while True:
            up = [c for c, pid in self.channels.items() if pid is not None]
            if not up:  # none has said hello yet, or the one asked has gone: the next one
                await asyncio.sleep(STATE_POLL_S)
                continue
            try:
                await up[0].call("load_pulled", name)
                return
            except ChannelClosed:
                continue

    async def _stage(self, channel: Channel, action: Action, name: str) -> Staged:
        staged = await self.service.control.stage(action, name)
        if not staged.unchanged:
            self._open(channel).staged.add(staged.key)
        return staged

    async def _abort(self, channel: Channel, key: str) -> None:
        self._open(channel).staged.discard(key)
        self.service.control.abort(key)

    async def _commit(self, channel: Channel, key: str) -> str | None:
        """The staged version served from here on, and every HTTP process switched to it (they tokenize
        with its text half from their answer on) -> the key of the version it replaced, to retire (None when
        an HTTP process did not switch: the old version stays for its items)."""
        self._open(channel).staged.discard(key)
        old = self.service.control.commit(key)
        return self._to_retire(channel, old, await self._changed())

    async def _unload(self, channel: Channel, name: str) -> str | None:
        key = self.service.control.unload(name)
        return self._to_retire(channel, key, await self._changed())

    async def _retire(self, channel: Channel, key: str | None) -> None:
        self._open(channel).retiring.discard(key)
        await self.service.control.retire(key)

    def _to_retire(self, channel: Channel, key: str | None, switched: bool) -> str | None:
        if key is not None and not switched:
            log.error("kept version %s: an HTTP process may still send its items", key)
            return None
        if key is not None:
            self._open(channel).retiring.add(key)
        return key

    def _open(self, channel: Channel) -> Change:
        return self.changes.setdefault(channel, Change())

    def _leftovers(self, channel: Channel) -> None:
        """An HTTP process gone during a change it ordered: its staged versions aborted, the versions it was
        to retire retired (else they would hold their weights, and the model's next change a 409)."""
        change = self.changes.pop(channel, None)
        if change is None:
            return
        for key in change.staged:
            log.warning("an HTTP process left during a change: version %s dropped", key)
            self.service.control.abort(key)
        for key in change.retiring:
            task = asyncio.create_task(self.service.control.retire(key))
            self._retirements.add(task)
            task.add_done_callback(self._retirements.discard)

    async def _changed(self) -> bool:
        """Readiness and the model list told, and every HTTP process's routing made the same as ours: each
        answers once it has switched, so no item of a replaced version comes after (a channel keeps order)
        -> whether every one did."""
        await self.service.control.changed()
        self._told = None
        registry = self.service.life.ready_registry()
        served = [(name, e.version, registry.failed.get(name)) for name, e in registry.entries.items()]
        served += [
            (name, "", reason) for name, reason in registry.failed.items() if name not in registry.entries
        ]
        up = [c for c, pid in self.channels.items() if pid is not None]
        budget = self.service.settings.model_load_timeout_s
        synced = await asyncio.gather(*(asyncio.wait_for(c.call("sync", served), budget) for c in up),
                                      return_exceptions=True)  # fmt: skip
        for channel, answer in zip(up, synced, strict=True):
            if isinstance(answer, BaseException):
                log.error("HTTP process %s did not take the model change: %s", self.pids.get(channel), answer)
        return not any(isinstance(answer, BaseException) for answer in synced)

    async def _own_families(self) -> list[Metric]:
        """This process's metric families alone (the other model processes' part of a scrape)."""
        return list(self.service.metrics.registry.collect())

    async def _metrics(self, others: list[Metric] | None = None) -> bytes:
        """This process's metric families, every HTTP process's and those of the HTTP processes that have
        gone (app/parallel/departed.py), summed: counters never go backwards. `others`: the other model
        processes' families (asked by the HTTP process: the first model process alone gathers the HTTP
        processes')."""
        up = [c for c, pid in self.channels.items() if pid is not None]
        asks = (asyncio.wait_for(c.call("families"), METRICS_TIMEOUT_S) for c in up)
        for channel, answer in zip(up, await asyncio.gather(*asks, return_exceptions=True), strict=True):
            if isinstance(answer, list) and channel in self.pids:  # still connected
                self.scraped[channel] = answer
        # from here on nothing awaits: a process that went during the gather is in departed, not here too
        families = [list(self.service.metrics.registry.collect())]
        families += self.scraped.values()  # a process that did not answer in time: its last answer
        if self.departed is not None:
            families.append(self.departed.families())
        if others:
            families.append(others)
        return render(merge(families))


def _listen(path: str) -> socket.socket:
    """A Unix socket listening at `path` (a stale one left there is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    listener.setblocking(False)
    return listener


def _logged(answer: Any) -> Handler:
    """Service.answer, with a debug line under the request's id (this process's logs name the requests
    too)."""

    async def run(task: str, *args: Any, **kwargs: Any) -> Any:
        log.debug("%s from an HTTP process", task)
        return await answer(task, *args, **kwargs)

    return run


async def _main(
    settings: Settings, path: str, http_workers: int, heartbeat_fd: int, metrics_dir: str, index: int,
    processes: int,
) -> None:  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # text work, detection too, is the HTTP processes'; pulls are the first model process's (Engine.pulls)
    service = Service(settings, Metrics(), detector=False, pulls=False)
    departed = Departed(metrics_dir) if index == 0 else None  # the first gathers the HTTP processes'
    engine = Engine(service, http_workers, Beat(heartbeat_fd), departed, pulls=index == 0)
    await engine.serve(path, stop)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed, as uvicorn's loop="auto" gives the HTTP processes: each call,
    future and reply of the model process's loop costs less there (BENCHMARKS.md, "The machinery's
    ceiling"); None: asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def main(argv: list[str]) -> int:
    path, http_workers, heartbeat_fd, metrics_dir = argv[0], int(argv[1]), int(argv[2]), argv[3]
    index, processes = (int(argv[4]), int(argv[5])) if len(argv) > 5 else (0, 1)
    settings = load_settings()
    # its cores: the slice the supervisor started it on (app/parallel/shares.py)
    cores = len(os.sched_getaffinity(0)) if pinned(settings, processes) else None
    settings = model_settings(settings, index, processes, cores)
    configure_logging(settings.log_format, settings.log_level)
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor orders the shutdown
    if processes > 1:
        log.info(
            "model process %d of %d: %s, %d inference workers x %d threads", index + 1, processes,
            f"cores {sorted(os.sched_getaffinity(0))}" if cores else "not pinned",
            settings.inference_workers_count(), settings.inference_threads(),
        )  # fmt: skip
    freeze_startup()  # app/core/heap.py: the imports, out of the collector's full passes
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(_main(settings, path, http_workers, heartbeat_fd, metrics_dir, index, processes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

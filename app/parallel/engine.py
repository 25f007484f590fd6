"""The model process: the one Service (models, batchers, inference workers, admission limits, one CUDA
context), answering the HTTP processes over a Unix socket.

python -m app.parallel.engine SOCKET_PATH HTTP_WORKERS   (started by app.parallel.supervisor)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from functools import partial
from typing import Any

from app.core.logs import configure_logging
from app.core.metrics import Metrics
from app.core.settings import load_settings
from app.parallel.channel import Channel, Handler
from app.parallel.lifeline import die_with_parent
from app.parallel.merge import count_process, merge, render
from app.schemas import ModelInfo, Readiness
from app.service import Service

log = logging.getLogger("app.parallel.engine")  # run as __main__
STATE_POLL_S = 0.05  # how often readiness is compared with what the HTTP processes were last told
METRICS_TIMEOUT_S = 2.0  # an HTTP process that does not send its metrics within this is left out of a scrape


class Engine:
    """Serves `service` to the HTTP processes; `http_workers` of them must say hello before it is ready."""

    def __init__(self, service: Service, http_workers: int) -> None:
        self.service, self.http_workers = service, http_workers
        count_process(service.metrics.registry, "model")
        self.channels: dict[Channel, int | None] = {}  # -> the pid of its HTTP process once it said hello
        self._told: tuple[Readiness, list[ModelInfo]] | None = None
        self.draining = False  # an HTTP process said bye: the server is shutting down

    async def serve(self, path: str, stop: asyncio.Event) -> None:
        """Start the service, listen on `path` until `stop`, then drain the service (SIGTERM comes after
        the HTTP processes have finished their requests)."""
        await self.service.start()
        server = await asyncio.start_unix_server(self._connected, path=path)
        poll = asyncio.create_task(self._push_state())
        try:
            await stop.wait()
        finally:
            poll.cancel()
            server.close()
            await self.service.stop()
            for channel in list(self.channels):
                channel.close()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers: dict[str, Handler] = {"answer": _logged(self.service.answer), "metrics": self._metrics}
        channel = Channel(reader, writer, handlers)
        handlers["hello"] = partial(self._hello, channel)
        handlers["bye"] = partial(self._bye, channel)
        self.channels[channel] = None
        try:
            await channel.serve()
        finally:
            pid = self.channels.pop(channel, None)
            if pid is not None and not self.draining:
                log.warning("HTTP process %d has gone", pid)
            self._told = None  # tell the others: one fewer is up

    async def _hello(self, channel: Channel, pid: int) -> tuple[Readiness, list[ModelInfo]]:
        self.channels[channel] = pid
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
        """The service's, not ready while an HTTP process is missing, shutting down once one said bye."""
        ready = self.service.readiness()
        if self.draining:
            ready = Readiness(
                status="shutting_down", reason="the server is shutting down", models=ready.models
            )
        up = sum(pid is not None for pid in self.channels.values())
        if ready.status == "ready" and up < self.http_workers:
            reason = f"{up} of {self.http_workers} HTTP processes up"
            ready = Readiness(status="loading", reason=reason, models=ready.models)
        return ready

    async def _push_state(self) -> None:
        while True:
            if self._told is None or self.readiness() != self._told[0]:
                self._told = state = self.state()  # the model list changes with the readiness
                for channel, pid in self.channels.items():
                    if pid is not None:
                        channel.note("state", *state)
            await asyncio.sleep(STATE_POLL_S)

    async def _metrics(self) -> bytes:
        """This process's metric families and every HTTP process's, summed."""
        up = [c for c, pid in self.channels.items() if pid is not None]
        asks = (asyncio.wait_for(c.call("families"), METRICS_TIMEOUT_S) for c in up)
        theirs = await asyncio.gather(*asks, return_exceptions=True)  # a stuck process: left out
        families = [list(self.service.metrics.registry.collect())]
        families += [f for f in theirs if isinstance(f, list)]
        return render(merge(families))


def _logged(answer: Any) -> Handler:
    """Service.answer, with a debug line under the request's id (this process's logs name the requests
    too)."""

    async def run(task: str, *args: Any, **kwargs: Any) -> Any:
        log.debug("%s from an HTTP process", task)
        return await answer(task, *args, **kwargs)

    return run


async def _main(path: str, http_workers: int) -> None:
    settings = load_settings()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    engine = Engine(Service(settings, Metrics()), http_workers)
    await engine.serve(path, stop)


def main(argv: list[str]) -> int:
    path, http_workers = argv[0], int(argv[1])
    settings = load_settings()
    configure_logging(settings.log_format, settings.log_level)
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor orders the shutdown
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(path, http_workers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

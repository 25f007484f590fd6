"""python -m app with APP_HTTP_WORKERS > 1: bind the listening socket once, start the model process and the
HTTP processes (each accepts from the shared socket), restart an HTTP process that dies, stop loudly when the
model process dies, stops answering (its heartbeat, app/parallel/heartbeat.py) or HTTP processes keep dying,
and on SIGTERM or SIGINT drain in order: the HTTP processes finish their requests (they still need the model
process), then the model process stops. Either way the listening socket closes first (the supervisor's copy,
then the HTTP processes'): a client that connects during a drain is refused, never accepted and reset."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from types import FrameType

from app.core.settings import Settings
from app.parallel.heartbeat import STALL_S, Listen, wedged_after

log = logging.getLogger("app.parallel")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus_client at import (departed.py)
POLL_S = 0.05
MAX_RESTARTS = 5  # HTTP process deaths within RESTART_WINDOW_S before the server stops: a crash loop
RESTART_WINDOW_S = 60.0
MODEL_GRACE_S = 5.0  # the model process's share of a shutdown once the HTTP processes are done
BACKLOG = 2048  # uvicorn's default


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG)


class Supervisor:
    def __init__(self, settings: Settings, http_workers: int) -> None:
        self.settings, self.http_workers = settings, http_workers
        self.stopping = False
        self.deaths: deque[float] = deque()

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (exit 0) or a failure that leaves the server unable to serve (exit 1)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        s = self.settings
        try:
            listener = listen(s.host, s.port)
        except OSError as e:  # one line and exit 1, as uvicorn
            log.error("cannot listen on %s:%d: %s", s.host, s.port, e.strerror)
            return 1
        with listener, tempfile.TemporaryDirectory(prefix="app-") as tmp:
            self.path = os.path.join(tmp, "model.sock")
            self.fd = listener.fileno()
            self.metrics_dir = os.path.join(tmp, "metrics")  # the HTTP processes' counters (departed.py)
            os.mkdir(self.metrics_dir)
            heart, beats = os.pipe()
            args = (self.path, str(self.http_workers), str(beats), self.metrics_dir)
            model_env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}  # its gauges read live
            # not the listening socket: it would keep it open, and a drain would accept and reset
            self.engine = self._spawn("engine", *args, fds=(beats,), env=model_env)
            os.close(beats)  # the model process holds the write end: a death reads as an end of file
            self.heartbeat = Listen(heart)
            self.http = [self._spawn_http() for _ in range(self.http_workers)]
            pids = ", ".join(str(p.pid) for p in self.http)
            log.info(
                "serving on %s:%d from %d HTTP processes (%s) and one model process (%d)",
                s.host, s.port, self.http_workers, pids, self.engine.pid,
            )  # fmt: skip
            status = self._watch()
            listener.close()  # the HTTP processes close theirs on SIGTERM: new connections are refused
            self.heartbeat.close()
            return self._shutdown() or status

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def _spawn(
        self, role: str, *args: str, fds: tuple[int, ...] = (), env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        # a session of its own: a terminal's Ctrl-C reaches the supervisor only, which orders the shutdown
        return subprocess.Popen(
            [sys.executable, "-m", f"app.parallel.{role}", *args],
            pass_fds=fds,
            start_new_session=True,
            env=env,
        )

    def _spawn_http(self) -> subprocess.Popen[bytes]:
        # prometheus-client's multiprocess mode: its counters outlive it (app/parallel/departed.py)
        env = os.environ | {MULTIPROC_ENV: self.metrics_dir}
        return self._spawn("http", str(self.fd), self.path, str(self.http_workers), fds=(self.fd,), env=env)

    def _watch(self) -> int:
        """Until a signal (0) or a failure (1): restart HTTP processes that die."""
        wedged_s, stalled = wedged_after(self.settings.request_timeout_s), False
        while not self.stopping:
            time.sleep(POLL_S)
            if (code := self.engine.poll()) is not None:
                log.critical("the model process exited with %s: stopping the server", code)
                return 1
            silent = self.heartbeat.silent_for(time.monotonic())
            if silent > wedged_s:
                log.critical(
                    "the model process has not answered for %.1f s (APP_REQUEST_TIMEOUT_S + %.1f s): killed, "
                    "stopping the server", silent, wedged_s - self.settings.request_timeout_s,
                )  # fmt: skip
                self.engine.kill()  # SIGKILL: it may be stopped (SIGSTOP), and then SIGTERM waits
                self.engine.wait()
                return 1
            if stalled != (silent > STALL_S):
                stalled = not stalled
                if stalled:
                    log.error("the model process has not answered for %.1f s: not ready", silent)
                else:
                    log.warning("the model process answers again")
            for i, proc in enumerate(self.http):
                if (code := proc.poll()) is None or self.stopping:
                    continue
                now = time.monotonic()
                self.deaths.append(now)
                while self.deaths[0] < now - RESTART_WINDOW_S:
                    self.deaths.popleft()
                if len(self.deaths) > MAX_RESTARTS:
                    log.critical(
                        "HTTP processes died %d times within %.0f s (the last, %d, exited with %s): stopping "
                        "the server", len(self.deaths), RESTART_WINDOW_S, proc.pid, code,
                    )  # fmt: skip
                    return 1
                self.http[i] = self._spawn_http()
                log.error("HTTP process %d exited with %s: restarted as %d", proc.pid, code, self.http[i].pid)
        return 0

    def _shutdown(self) -> int:
        """SIGTERM the HTTP processes; once they are done (or at APP_SHUTDOWN_TIMEOUT_S), the model process.
        -> 1 if a process had to be killed."""
        deadline = (
            time.monotonic() + self.settings.shutdown_timeout_s + 1
        )  # uvicorn's own limit, and a second
        killed = _stop(self.http, deadline)
        killed |= _stop([self.engine], time.monotonic() + MODEL_GRACE_S)
        if killed:
            log.error("processes that had not stopped in time were killed")
        return int(killed)


def _stop(procs: list[subprocess.Popen[bytes]], deadline: float) -> bool:
    """SIGTERM each process still running, wait until `deadline`, SIGKILL the rest -> whether any was killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    killed = False
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed = True
    return killed


def run(settings: Settings, http_workers: int) -> int:
    return Supervisor(settings, http_workers).run()

"""python -m app with APP_HTTP_WORKERS or APP_MODEL_PROCESSES > 1: bind the listening socket once, start the
model processes (side by side; on a CPU each on its slice of the cores, with CUDA each on its GPU:
app/parallel/shares.py) and the HTTP processes (each accepts from the shared socket and talks to every model
process), restart an HTTP process that dies and a model process that dies or stops answering (its heartbeat,
app/parallel/heartbeat.py: killed, then restarted on the same socket; the HTTP processes reconnect), stop
loudly when either kind keeps dying (a crash loop), and on SIGTERM or SIGINT drain in order:
the HTTP processes finish their requests (they still need the model processes), then the model processes
stop. Either way the listening socket closes first (the supervisor's copy,
then the HTTP processes'): a client that connects during a drain is refused, never accepted and reset."""

from __future__ import annotations

import gc
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

from app.core.settings import Settings, usable_cores
from app.parallel.heartbeat import STALL_S, Listen, wedged_after
from app.parallel.shares import core_slices, gpu_env, pinned

log = logging.getLogger("app.parallel")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus_client at import (departed.py)
POLL_S = 0.05
MAX_RESTARTS = 5  # HTTP process deaths within RESTART_WINDOW_S before the server stops: a crash loop
RESTART_WINDOW_S = 60.0
# model process deaths (every one's together) before the server stops: a restart reloads the models (seconds,
# a minute on a GPU), so a process that dies at each load would never reach 5 in 60 s
MODEL_MAX_RESTARTS = 3
MODEL_RESTART_WINDOW_S = 600.0
MODEL_GRACE_S = 5.0  # the model process's share of a shutdown once the HTTP processes are done
BACKLOG = 2048  # uvicorn's default


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG)


class Deaths:
    """Deaths within the last `window_s`: more than `limit` of them is a crash loop."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit, self.window_s = limit, window_s
        self.times: deque[float] = deque()

    def add(self, now: float) -> bool:
        """One more at `now` -> whether that makes a crash loop."""
        self.times.append(now)
        while self.times[0] < now - self.window_s:
            self.times.popleft()
        return len(self.times) > self.limit

    def __len__(self) -> int:
        return len(self.times)


class Supervisor:
    def __init__(self, settings: Settings, http_workers: int, model_processes: int = 1) -> None:
        self.settings, self.http_workers, self.model_processes = settings, http_workers, model_processes
        self.stopping = False
        self.deaths = Deaths(MAX_RESTARTS, RESTART_WINDOW_S)  # HTTP processes'
        self.model_deaths = Deaths(MODEL_MAX_RESTARTS, MODEL_RESTART_WINDOW_S)
        self.slices: list[list[int]] | None = None  # each model process's cores, when pinned

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (exit 0) or a failure that leaves the server unable to serve (exit 1)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        s = self.settings
        # what start-up left alive (torch itself, where the driver could not count the GPUs:
        # Settings.device_type) is permanent: the collections at exit skip it too, which otherwise rescan
        # torch's objects and hold the exit status back after every drain
        gc.freeze()
        try:
            listener = listen(s.host, s.port)
        except OSError as e:  # one line and exit 1, as uvicorn
            log.error("cannot listen on %s:%d: %s", s.host, s.port, e.strerror)
            return 1
        with listener, tempfile.TemporaryDirectory(prefix="app-") as tmp:
            self.paths = [os.path.join(tmp, f"model-{i}.sock") for i in range(self.model_processes)]
            self.fd = listener.fileno()
            self.metrics_dir = os.path.join(tmp, "metrics")  # the HTTP processes' counters (departed.py)
            os.mkdir(self.metrics_dir)
            self.engines, self.heartbeats = self._spawn_engines()  # loading side by side
            self.http = [self._spawn_http() for _ in range(self.http_workers)]
            pids = ", ".join(str(p.pid) for p in self.http)
            engines = ", ".join(str(p.pid) for p in self.engines)
            log.info(
                "serving on %s:%d from %d HTTP processes (%s) and %d model process(es) (%s)",
                s.host, s.port, self.http_workers, pids, self.model_processes, engines,
            )  # fmt: skip
            status = self._watch()
            listener.close()  # the HTTP processes close theirs on SIGTERM: new connections are refused
            for heartbeat in self.heartbeats:
                heartbeat.close()
            return self._shutdown() or status

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def _spawn_engines(self) -> tuple[list[subprocess.Popen[bytes]], list[Listen]]:
        """Every model process, each with its heartbeat pipe; on a CPU with several, each on its slice of the
        cores (self.slices), with CUDA each on its GPU."""
        n = self.model_processes
        self.slices = None
        if pinned(self.settings, n):
            # under a CPU quota (a container's limit) without a cpuset, as many cores as the quota allows
            cores = sorted(os.sched_getaffinity(0))[: usable_cores()]
            self.slices = core_slices(cores, n, self.http_workers)
        started = [self._spawn_engine(i) for i in range(n)]
        return [engine for engine, _ in started], [heartbeat for _, heartbeat in started]

    def _spawn_engine(self, i: int) -> tuple[subprocess.Popen[bytes], Listen]:
        """Model process `i` on its socket path, its slice of the cores (this thread's affinity while it
        starts, inherited) or its GPU, with its heartbeat pipe."""
        model_env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}  # its gauges read live
        heart, beats = os.pipe()
        args = (self.paths[i], str(self.http_workers), str(beats), self.metrics_dir, str(i))
        mine = os.sched_getaffinity(0) if self.slices else None
        try:
            if self.slices is not None:
                os.sched_setaffinity(0, self.slices[i])
            env = model_env | gpu_env(self.settings, i)
            # not the listening socket: it would keep it open, and a drain would accept and reset
            engine = self._spawn("engine", *args, str(self.model_processes), fds=(beats,), env=env)
        finally:
            os.close(beats)  # the model process holds the write end: a death reads as an end of file
            if mine is not None:
                os.sched_setaffinity(0, mine)  # the HTTP processes: every usable core
        return engine, Listen(heart)

    def _name(self, i: int) -> str:
        """Model process `i` in a log line (its number among several)."""
        n = self.model_processes
        return f" ({i + 1} of {n}, pid {self.engines[i].pid})" if n > 1 else ""

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
        args = (str(self.fd), self.paths[0], str(self.http_workers), *self.paths[1:])
        return self._spawn("http", *args, fds=(self.fd,), env=env)

    def _watch(self) -> int:
        """Until a signal (0) or a crash loop (1): restart the processes that die, and model processes that
        stop answering (killed first)."""
        wedged_s = wedged_after(self.settings.request_timeout_s)
        stalled = [False] * self.model_processes
        while not self.stopping:
            time.sleep(POLL_S)
            for i, (engine, heartbeat) in enumerate(zip(self.engines, self.heartbeats, strict=True)):
                if (code := engine.poll()) is not None:
                    if not self._restart_engine(i, f"exited with {code}"):
                        return 1
                    stalled[i] = False
                    continue
                silent = heartbeat.silent_for(time.monotonic())
                if silent > wedged_s:
                    engine.kill()  # SIGKILL: it may be stopped (SIGSTOP), and then SIGTERM waits
                    engine.wait()
                    why = (
                        f"had not answered for {silent:.1f} s (APP_REQUEST_TIMEOUT_S + "
                        f"{wedged_s - self.settings.request_timeout_s:.1f} s): killed"
                    )
                    if not self._restart_engine(i, why):
                        return 1
                    stalled[i] = False
                    continue
                if stalled[i] != (silent > STALL_S):
                    stalled[i] = not stalled[i]
                    if stalled[i]:
                        log.error(
                            "the model process has not answered for %.1f s: not ready%s",
                            silent,
                            self._name(i),
                        )
                    else:
                        log.warning("the model process answers again%s", self._name(i))
            for i, proc in enumerate(self.http):
                if (code := proc.poll()) is None or self.stopping:
                    continue
                if self.deaths.add(time.monotonic()):
                    log.critical(
                        "HTTP processes died %d times within %.0f s (the last, %d, exited with %s): stopping "
                        "the server", len(self.deaths), RESTART_WINDOW_S, proc.pid, code,
                    )  # fmt: skip
                    return 1
                self.http[i] = self._spawn_http()
                log.error("HTTP process %d exited with %s: restarted as %d", proc.pid, code, self.http[i].pid)
        return 0

    def _restart_engine(self, i: int, why: str) -> bool:
        """Model process `i` has gone (`why`): a new one on the same socket path, which the HTTP processes
        reconnect to (the others serve meanwhile) -> False when that makes a crash loop (stop the server)."""
        name = self._name(i)
        if self.stopping:  # a signal came meanwhile: nothing to restart for
            log.critical("the model process %s: stopping the server%s", why, name)
            return False
        if self.model_deaths.add(time.monotonic()):
            log.critical(
                "the model process %s: stopping the server (model processes died %d times within %.0f s)%s",
                why, len(self.model_deaths), MODEL_RESTART_WINDOW_S, name,
            )  # fmt: skip
            return False
        self.heartbeats[i].close()
        self.engines[i], self.heartbeats[i] = self._spawn_engine(i)
        log.error("the model process %s: restarted as %d%s", why, self.engines[i].pid, name)
        return True

    def _shutdown(self) -> int:
        """SIGTERM the HTTP processes; once they are done (or at APP_SHUTDOWN_TIMEOUT_S), the model processes.
        -> 1 if a process had to be killed."""
        deadline = (
            time.monotonic() + self.settings.shutdown_timeout_s + 1
        )  # uvicorn's own limit, and a second
        killed = _stop(self.http, deadline)
        killed |= _stop(self.engines, time.monotonic() + MODEL_GRACE_S)
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


def run(settings: Settings, http_workers: int, model_processes: int = 1) -> int:
    return Supervisor(settings, http_workers, model_processes).run()

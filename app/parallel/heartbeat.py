"""The model process's heartbeat: a model process whose event loop stops (SIGSTOP, a deadlock, a call that never
returns on the loop) is seen, not just one that dies. The beats come from the event loop, so a forward pass hung
in an inference thread is not seen here (its requests still get 504 at the deadline).

Every HEARTBEAT_S its event loop sends a note to each HTTP process and a byte down a pipe to the supervisor.
An HTTP process that has heard nothing from it for STALL_S answers /ready 503 with the reason (and 200 again
if it resumes). The supervisor that has heard nothing for `wedged_after(APP_REQUEST_TIMEOUT_S)` (by then every
request it held has been answered 504 by its HTTP process) kills it and restarts it, as for a death (within
the restart bound: app/parallel/supervisor.py).
"""

from __future__ import annotations

import contextlib
import os

HEARTBEAT_S = 0.25
STALL_S = 2.0  # silence before /ready turns 503: eight beats missed
# an HTTP process answers 504 this long past APP_REQUEST_TIMEOUT_S (remote.py): the model process's own 504
# comes first when it runs
DEADLINE_MARGIN_S = 0.5


def wedged_after(request_timeout_s: float) -> float:
    """Silence after which the model process counts as dead: every request it held has had its 504 (at
    the deadline and its margin), and STALL_S more."""
    return request_timeout_s + DEADLINE_MARGIN_S + STALL_S


class Beat:
    """The model process's end of the pipe (a non-blocking write end)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)

    def beat(self) -> None:
        # a full pipe: the supervisor is behind, and what waits in it says enough; a closed one: it has gone
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self.fd, b".")


class Listen:
    """The supervisor's end of the pipe: how long since the last beat (0 until the first one)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.last: float | None = None

    def silent_for(self, now: float) -> float:
        try:
            while os.read(self.fd, 4096):
                self.last = now
        except BlockingIOError:
            pass
        return 0.0 if self.last is None else now - self.last

    def close(self) -> None:
        os.close(self.fd)

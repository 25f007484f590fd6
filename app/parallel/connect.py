"""An HTTP process's connection to a model process's Unix socket: at start-up it waits for the model process
to listen (they start side by side), bounded; after a restart it keeps trying, with backoff, while the
successor starts (the supervisor stops the server if it cannot)."""

from __future__ import annotations

import asyncio

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
CONNECT_TIMEOUT_S = 60.0  # the model process listens within a second or two of its start; this is a bound
START_POLL_S = 0.05
# after a restart: the first retry, doubling to at most (the successor starts for a second or two)
REJOIN_FIRST_S, REJOIN_MAX_S = 0.05, 0.5


async def connect(path: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Stream:
    """Connect to the socket at `path`, waiting for it to listen; the last error after `timeout_s`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while True:
        try:
            return await asyncio.open_unix_connection(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if loop.time() > end:
                raise
            await asyncio.sleep(START_POLL_S)


async def reconnect(path: str) -> Stream:
    """Connect to the socket at `path` once it listens again (refused while the dead process's file is
    left there, absent while the successor replaces it), with backoff; no bound (cancel to stop)."""
    delay = REJOIN_FIRST_S
    while True:
        try:
            return await asyncio.open_unix_connection(path)
        except (FileNotFoundError, ConnectionRefusedError):
            await asyncio.sleep(delay)
            delay = min(2 * delay, REJOIN_MAX_S)

"""A request waiting for its batch results: `wait_all` (the service's), and the watcher for a client that
leaves meanwhile (also the model process's channel, app/parallel/channel.py): its type and when it starts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from app.core.errors import ClientDisconnected, DeadlineExceeded

log = logging.getLogger(__name__)

Disconnected = Callable[[], Coroutine[Any, Any, None]] | None  # resolves when the client goes away

# The disconnect watcher (a task reading the client's next ASGI message) starts only for requests still
# waiting after this long: most answers come sooner, and a task per request is a measurable share of the
# event loop at thousands of requests/s. A client that leaves sooner costs at most its own items.
WATCH_AFTER_S = 0.05


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

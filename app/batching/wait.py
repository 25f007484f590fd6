"""Watching for a client that leaves while its request waits for batch results (app.serving.service.wait_all; the
model process's channel, app/parallel/channel.py): the watcher's type and when it starts."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

Disconnected = Callable[[], Coroutine[Any, Any, None]] | None  # resolves when the client goes away

# The disconnect watcher (a task reading the client's next ASGI message) starts only for requests still
# waiting after this long: most answers come sooner, and a task per request is a measurable share of the
# event loop at thousands of requests/s. A client that leaves sooner costs at most its own items.
WATCH_AFTER_S = 0.05

"""A deadline that moves with every request but rarely arrives, kept on one loop timer armed lazily.

A connection's head and body deadlines are set and cleared several times per request, and almost never
expire. A loop timer per setting (call_later, then cancel) costs more than the rest of the bookkeeping. Here
a later due time costs nothing: the armed timer fires at the earlier time it was set for, sees the current
due time, and re-arms for it (once per timeout, not once per request). An earlier due time re-arms at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LazyTimer:
    """`callback` once the loop time reaches the due time last `set`, unless `clear`ed first; `close` on
    the connection's end (the armed timer holds the callback's owner)."""

    __slots__ = ("loop", "due", "callback", "handle", "handle_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.due = 0.0
        self.callback: Callable[[], object] | None = None
        self.handle: asyncio.TimerHandle | None = None
        self.handle_at = 0.0  # when the armed timer fires

    @property
    def pending(self) -> bool:
        return self.callback is not None

    def set(self, due: float, callback: Callable[[], object]) -> None:
        """Call `callback` at loop time `due` (in place of what was set)."""
        self.due, self.callback = due, callback
        if self.handle is None or due < self.handle_at:
            if self.handle is not None:
                self.handle.cancel()
            self.handle, self.handle_at = self.loop.call_at(due, self._fire), due

    def set_in(self, seconds: float, callback: Callable[[], object]) -> None:
        self.set(self.loop.time() + seconds, callback)

    def clear(self) -> None:
        """Nothing is due (the armed timer, if any, fires and finds nothing)."""
        self.callback = None

    def close(self) -> None:
        self.callback = None
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _fire(self) -> None:
        self.handle = None
        if self.callback is None:
            return
        if self.loop.time() < self.due:  # moved later since the timer was armed
            self.handle, self.handle_at = self.loop.call_at(self.due, self._fire), self.due
            return
        callback, self.callback = self.callback, None
        callback()

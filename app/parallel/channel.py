"""Calls between the server's processes over one stream (a Unix socket): length-prefixed pickled frames, in
both directions, many calls in flight at once.

A call carries the caller's request id (the callee logs under it, and sends back which models and batch size
ran it) and whether the caller watches its client: when that client leaves, the caller sends LEFT and the
callee's `disconnected()` resolves, so the callee stops the work exactly as it does in one process. A caller
that is cancelled sends CANCEL (the callee's task is cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from app.batching.wait import WATCH_AFTER_S, Disconnected
from app.core.request_id import CURRENT, RequestInfo

log = logging.getLogger(__name__)
HEADER = struct.Struct("!I")  # the frame's length in bytes
CALL, REPLY, LEFT, CANCEL, NOTE = range(5)
# a handler's keyword `disconnected`: the caller's client has left (resolves then); None when not watched
Handler = Callable[..., Awaitable[Any]]


class ChannelClosed(ConnectionError):
    """The process at the other end has gone (or the channel was closed)."""


class Channel:
    """One end of a connection between two processes. `handlers`: method name -> async function(*args,
    disconnected=..., **kwargs) for calls from the other end; notes (one-way, no answer) go to the same
    handlers. Run `serve()` as a task: it reads frames until the other end closes."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handlers: dict[str, Handler]
    ) -> None:
        self.reader, self.writer, self.handlers = reader, writer, handlers
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[tuple[bool, Any, Any]]] = {}  # our calls
        self._running: dict[int, tuple[asyncio.Task[Any], asyncio.Event]] = {}  # their calls
        self.closed = asyncio.get_running_loop().create_future()  # set to None once closed
        self.last_heard = asyncio.get_running_loop().time()  # when the last frame arrived (loop.time())
        self._out: list[bytes] = []  # frames waiting for this loop pass's write

    # --- our calls --------------------------------------------------------------------------------------

    async def call(self, method: str, *args: Any, disconnected: Disconnected = None, **kwargs: Any) -> Any:
        """The other end's `handlers[method](*args, **kwargs)`; its exception is raised here (ChannelClosed
        when it goes away first)."""
        if self.closed.done():
            raise ChannelClosed("the other process has gone")
        call_id = next(self._ids)
        info = CURRENT.get()
        reply = self._waiting[call_id] = asyncio.get_running_loop().create_future()
        who = (info.id, info.client) if info else None  # the client: the model process's fair queues
        self._send((CALL, call_id, method, args, kwargs, who, disconnected is not None))
        watcher = _Watch(disconnected, lambda: self._send((LEFT, call_id))) if disconnected else None
        try:
            ok, value, ran = await reply
        except asyncio.CancelledError:
            self._send((CANCEL, call_id))
            raise
        finally:
            self._waiting.pop(call_id, None)
            if watcher is not None:
                watcher.cancel()
        if info is not None:  # the access line's model and batch size
            for model in ran[0]:
                info.ran(model, ran[1])
        if not ok:
            raise rebuild(*value)
        return value

    def silent_for(self) -> float:
        """Seconds since the other end last sent anything."""
        return asyncio.get_running_loop().time() - self.last_heard

    def note(self, method: str, *args: Any) -> None:
        """A one-way call (no answer; errors are logged at the other end)."""
        self._send((NOTE, -1, method, args, {}, None, False))

    # --- their calls ------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Read and dispatch frames until the other end closes; then fail our calls and stop theirs."""
        clock = asyncio.get_running_loop().time
        try:
            while True:
                try:
                    head = await self.reader.readexactly(HEADER.size)
                    frame = pickle.loads(await self.reader.readexactly(HEADER.unpack(head)[0]))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                self.last_heard = clock()
                self._dispatch(frame)
        finally:
            self.close()

    def _dispatch(self, frame: tuple[Any, ...]) -> None:
        kind, call_id = frame[0], frame[1]
        if kind == REPLY:
            if (reply := self._waiting.get(call_id)) is not None and not reply.done():
                reply.set_result(frame[2:])
        elif kind in (CALL, NOTE):
            left = asyncio.Event()
            task = asyncio.create_task(self._run(call_id, *frame[2:], left=left))
            if kind == CALL:
                self._running[call_id] = (task, left)
                task.add_done_callback(lambda _: self._running.pop(call_id, None))
        elif (running := self._running.get(call_id)) is not None:
            if kind == LEFT:
                running[1].set()
            else:  # CANCEL
                running[0].cancel()

    async def _run(
        self,
        call_id: int,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        who: tuple[str, str] | None,
        watched: bool,
        *,
        left: asyncio.Event,
    ) -> None:
        info = RequestInfo(*who) if who else None
        CURRENT.set(info)  # this task's context: logs and batches name the request
        if watched:
            kwargs["disconnected"] = left.wait
        try:
            value, ok = await self.handlers[method](*args, **kwargs), True
        except asyncio.CancelledError:
            return  # the caller has stopped waiting
        except Exception as e:
            if call_id < 0:
                log.exception("note %s failed", method)
                return
            value, ok = portable(e), False
        if call_id >= 0:
            ran = (info.models, info.batch_size) if info else ((), 0)
            self._send((REPLY, call_id, ok, value, ran))

    # --- both -------------------------------------------------------------------------------------------

    def _send(self, frame: tuple[Any, ...]) -> None:
        """Queue a frame; the frames of one event-loop pass go out in one write (a batch's answers: one
        system call, not one per request)."""
        if self.closed.done():  # e.g. a client left after the other process had gone
            return
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out += (HEADER.pack(len(data)), data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if not self.closed.done():
            self.writer.write(b"".join(out))

    def close(self) -> None:
        """Fail the calls waiting for an answer (ChannelClosed), cancel the ones we run, close the stream."""
        if self.closed.done():
            return
        self.closed.set_result(None)
        for reply in self._waiting.values():
            if not reply.done():
                reply.set_result((False, (ChannelClosed, ("the other process has gone",), {}), ((), 0)))
        for task, _ in list(self._running.values()):
            task.cancel()
        with contextlib.suppress(Exception):
            self.writer.write(b"".join(self._out))  # e.g. a "bye" note: sent before the stream closes
            self.writer.close()
        self._out = []


def portable(error: Exception) -> tuple[type[Exception], tuple[Any, ...], dict[str, Any]]:
    """`error` as (class, args, attributes): rebuilt by `rebuild` without its __init__, which may take other
    arguments than its args (QueueFull). A RuntimeError naming it when those do not pickle."""
    parts = (type(error), error.args, dict(getattr(error, "__dict__", {})))
    try:
        pickle.dumps(parts)
    except Exception:
        return RuntimeError, (f"{type(error).__name__}: {error}",), {}
    return parts


def rebuild(cls: type[Exception], args: tuple[Any, ...], state: dict[str, Any]) -> Exception:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class _Watch:
    """After WATCH_AFTER_S (most answers come sooner), wait for the client to leave, then on_left()."""

    def __init__(self, disconnected: Callable[[], Awaitable[None]], on_left: Callable[[], None]) -> None:
        self.disconnected, self.on_left = disconnected, on_left
        self.task: asyncio.Task[None] | None = None
        self.timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._start)

    def _start(self) -> None:
        self.task = asyncio.ensure_future(self.disconnected())
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is None:
            self.on_left()

    def cancel(self) -> None:
        self.timer.cancel()
        if self.task is not None:
            self.task.cancel()

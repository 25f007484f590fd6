"""Calls between the server's processes over one stream (a Unix socket), in both directions, many calls in
flight at once: the messages of one event-loop pass go out as one frame (app/parallel/frames.py: batch
items and outputs as columns of numbers, the rest pickled).

A call carries the caller's request id (the callee logs under it, and sends back which models and batch size
ran it) and whether the caller watches its client: when that client leaves, the caller sends LEFT and the
callee's `disconnected()` resolves, so the callee stops the work exactly as it does in one process. A caller
that is cancelled sends CANCEL (the callee's task is cancelled).

A handler wrapped in `Immediate` starts without a task (the model process's `submit`: thousands a second):
it is called as the frame is read and returns Futures, and the answer is their results (asyncio.gather's,
with callbacks and no task); LEFT answers ClientDisconnected, and CANCEL cancels them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import pickle
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from app.batching.wait import WATCH_AFTER_S, Disconnected
from app.core.errors import ClientDisconnected
from app.core.request_id import CURRENT, RequestInfo
from app.parallel import frames
from app.parallel.call_timers import EXPIRE, WATCH, CallTimers
from app.parallel.frames import HEADER, MAX_FRAME, BadFrame
from app.parallel.io_threads import IOThreads

log = logging.getLogger(__name__)
CALL, REPLY, LEFT, CANCEL, NOTE = range(5)
assert (CALL, REPLY) == (frames.CALL, frames.REPLY)
# a handler's keyword `disconnected`: the caller's client has left (resolves then); None when not watched
Handler = Callable[..., Awaitable[Any]]


class Immediate:
    """A handler called as its call is read, with CURRENT set to the caller's request and no task of its own:
    `fn(*args, **kwargs)` returns a list of Futures (or raises: the caller gets the error), and the answer
    is the list of their results, or the first one's error. Whoever made them settles them (an error on
    one, e.g. a deadline, is the answer); the channel cancels the others once answered, and all of them on
    CANCEL, on LEFT (answered ClientDisconnected) or when it closes. Once answered the list is emptied (one
    who keeps it, e.g. until a deadline, holds no results)."""

    def __init__(self, fn: Callable[..., list[asyncio.Future[Any]]]) -> None:
        self.fn = fn


class ChannelClosed(ConnectionError):
    """The process at the other end has gone (or the channel was closed)."""


class CallExpired(TimeoutError):
    """A call given up at its `expires` time (the other end was told to cancel it)."""


class Channel:
    """One end of a connection between two processes. `handlers`: method name -> async function(*args,
    disconnected=..., **kwargs) for calls from the other end; notes (one-way, no answer) go to the same
    handlers. Run `serve()` as a task: it reads frames until the other end closes. `Channel.threaded(sock,
    handlers)`: the same over a plain socket that two threads read and write (app/parallel/io_threads.py)."""

    def __init__(
        self,
        reader: asyncio.StreamReader | None,
        writer: asyncio.StreamWriter | None,
        handlers: dict[str, Handler | Immediate],
    ) -> None:
        self.reader, self.writer, self.handlers = reader, writer, handlers
        self._io: IOThreads | None = None
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # threads: the end
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[tuple[bool, Any, Any]]] = {}  # our calls
        self._running: dict[int, tuple[asyncio.Task[Any], asyncio.Event]] = {}  # their calls
        self._immediate: dict[int, _Gather] = {}  # their calls to Immediate handlers
        self.closed = asyncio.get_running_loop().create_future()  # set to None once closed
        self.last_heard = asyncio.get_running_loop().time()  # when the last frame arrived (loop.time())
        self._out: list[tuple[Any, ...]] = []  # messages waiting for this loop pass's frame
        # our calls' watch starts and deadlines (app/parallel/call_timers.py); the watchers started
        self._timers = CallTimers(asyncio.get_running_loop(), self._waiting, self._due)
        self._watchers: dict[int, asyncio.Task[None]] = {}

    @classmethod
    def threaded(cls, sock: socket.socket, handlers: dict[str, Handler | Immediate]) -> Channel:
        """A channel over `sock` (connected; its own from now on) whose frames are read, decoded, encoded
        and written by two threads: the event loop gets each read chunk's messages in one callback."""
        channel = cls(None, None, handlers)
        sock.setblocking(True)
        loop = asyncio.get_running_loop()
        channel._io = IOThreads(sock, loop, channel._received, channel._end)
        return channel

    def _received(self, messages: list[tuple[Any, ...]]) -> None:
        self.last_heard = asyncio.get_running_loop().time()
        for message in messages:
            self._dispatch(message)

    def _end(self) -> None:
        if not self._ended.done():
            self._ended.set_result(None)

    # --- our calls --------------------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        *args: Any,
        disconnected: Disconnected = None,
        expires: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """The other end's `handlers[method](*args, **kwargs)`; its exception is raised here (ChannelClosed
        when it goes away first). `disconnected`: the caller's client, watched from WATCH_AFTER_S on (LEFT
        when it leaves); `expires`: the loop time at which the call is given up (CallExpired here, CANCEL
        there)."""
        if self.closed.done():
            raise ChannelClosed("the other process has gone")
        call_id = next(self._ids)
        info = CURRENT.get()
        loop = asyncio.get_running_loop()
        reply = self._waiting[call_id] = loop.create_future()
        who = (info.id, info.client) if info else None  # the client: the model process's fair queues
        self._send((CALL, call_id, method, args, kwargs, who, disconnected is not None))
        if disconnected is not None:
            self._timers.add(loop.time() + WATCH_AFTER_S, call_id, WATCH, disconnected)
        if expires is not None:
            self._timers.add(expires, call_id, EXPIRE)
        try:
            ok, value, ran = await reply
        except asyncio.CancelledError:
            self._send((CANCEL, call_id))
            raise
        finally:
            self._waiting.pop(call_id, None)
            if (watcher := self._watchers.pop(call_id, None)) is not None:
                watcher.cancel()
        if info is not None:  # the access line's model and batch size
            for model in ran[0]:
                info.ran(model, ran[1])
        if not ok:
            raise rebuild(*value)
        return value

    def _due(self, call_id: int, kind: int, disconnected: Any) -> None:
        """A call of ours still waiting at a due time: its client watched from now on, or expired."""
        if kind == WATCH:
            # its own context: the timer's is that of whichever call armed it
            watcher = self._watchers[call_id] = asyncio.get_running_loop().create_task(
                disconnected(), context=contextvars.Context()
            )
            watcher.add_done_callback(partial(self._left, call_id))
        elif not (reply := self._waiting[call_id]).done():  # (not answered in this loop pass)
            self._send((CANCEL, call_id))
            reply.set_exception(CallExpired())

    def _left(self, call_id: int, watcher: asyncio.Task[None]) -> None:
        if not watcher.cancelled() and watcher.exception() is None and call_id in self._waiting:
            self._send((LEFT, call_id))

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
            if self._io is not None:
                await self._ended
                return
            assert self.reader is not None
            while True:
                try:
                    (size,) = HEADER.unpack(await self.reader.readexactly(HEADER.size))
                    if size > MAX_FRAME:
                        raise BadFrame(f"a frame of {size} bytes")
                    messages = frames.decode(await self.reader.readexactly(size))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                except BadFrame:
                    log.exception("a bad frame from the other process: closing the channel")
                    break
                self.last_heard = clock()
                for message in messages:
                    self._dispatch(message)
        finally:
            self.close()

    def _dispatch(self, frame: tuple[Any, ...]) -> None:
        kind, call_id = frame[0], frame[1]
        if kind == REPLY:
            if (reply := self._waiting.get(call_id)) is not None and not reply.done():
                reply.set_result(frame[2:])
        elif kind == CALL and type(handler := self.handlers.get(frame[2])) is Immediate:
            self._start(handler, call_id, *frame[3:6])
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
        elif (gather := self._immediate.get(call_id)) is not None:
            if kind == LEFT:
                gather.answer(False, portable(ClientDisconnected()))
            else:  # CANCEL
                gather.stop()

    def _start(
        self,
        handler: Immediate,
        call_id: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        who: tuple[str, str] | None,
    ) -> None:
        """A call to an Immediate handler: started here, answered once its Futures are done."""
        info = RequestInfo(*who) if who else None
        token = CURRENT.set(info)  # what the handler queues names the request (fair turns, batch logs)
        try:
            parts = handler.fn(*args, **kwargs)
        except Exception as e:
            self._send((REPLY, call_id, False, portable(e), _ran(info)))
            return
        finally:
            CURRENT.reset(token)
        gather = self._immediate[call_id] = _Gather(self, call_id, info, parts)
        if len(parts) == 1:
            parts[0].add_done_callback(gather.one_done)
        elif parts:
            for i, part in enumerate(parts):
                part.add_done_callback(partial(gather.part_done, i))
        else:
            gather.answer(True, [])

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
            value, ok = await self.handlers[method](*args, **kwargs), True  # type: ignore[operator]
        except asyncio.CancelledError:
            return  # the caller has stopped waiting
        except Exception as e:
            if call_id < 0:
                log.exception("note %s failed", method)
                return
            value, ok = portable(e), False
        if call_id >= 0:
            self._send((REPLY, call_id, ok, value, _ran(info)))

    # --- both -------------------------------------------------------------------------------------------

    def _send(self, message: tuple[Any, ...]) -> None:
        """Queue a message; the messages of one event-loop pass go out as one frame in one write (a batch's
        answers: one encoding and one system call, not one per request)."""
        if self.closed.done():  # e.g. a client left after the other process had gone
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(message)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if not out or self.closed.done():
            return
        if self._io is not None:
            self._io.send(out)
        else:
            assert self.writer is not None
            self.writer.write(frames.encode(out))

    def abandon(self, error: Exception) -> int:
        """Answer every call waiting on the other end with `error`, and tell it to drop them (CANCEL frames,
        read when it runs again): it has stopped answering, and its callers must not wait -> how many."""
        waiting = [(i, r) for i, r in self._waiting.items() if not r.done()]
        for call_id, reply in waiting:
            reply.set_result((False, portable(error), ((), 0)))
            self._send((CANCEL, call_id))
        return len(waiting)

    def close(self) -> None:
        """Fail the calls waiting for an answer (ChannelClosed), cancel the ones we run, close the stream."""
        if self.closed.done():
            return
        self.closed.set_result(None)
        self._timers.close()
        for reply in self._waiting.values():
            if not reply.done():
                reply.set_result((False, (ChannelClosed, ("the other process has gone",), {}), ((), 0)))
        for task, _ in list(self._running.values()):
            task.cancel()
        for gather in list(self._immediate.values()):
            gather.stop()
        self._end()
        if self._io is not None:
            self._io.close(self._out)  # e.g. a "bye" note: sent before the stream closes
        with contextlib.suppress(Exception):
            if self.writer is not None:
                if self._out:
                    self.writer.write(frames.encode(self._out))
                self.writer.close()
        self._out = []


def _ran(info: RequestInfo | None) -> tuple[list[str], int]:
    """What a reply tells the caller's request: the models that ran it, and its largest batch."""
    return (info.models, info.batch_size) if info else ([], 0)


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


class _Gather:
    """An Immediate call's Futures, answered when all are done (their results) or one fails (its error)."""

    __slots__ = ("channel", "call_id", "info", "parts", "results", "remaining")

    def __init__(
        self, channel: Channel, call_id: int, info: RequestInfo | None, parts: list[asyncio.Future[Any]]
    ) -> None:
        self.channel, self.call_id, self.info, self.parts = channel, call_id, info, parts
        self.results: list[Any] = [None] * len(parts)
        self.remaining = len(parts)

    def one_done(self, part: asyncio.Future[Any]) -> None:
        self.part_done(0, part)

    def part_done(self, i: int, part: asyncio.Future[Any]) -> None:
        if part.cancelled() or self.remaining <= 0:
            return  # stopped, or answered already
        if (error := part.exception()) is not None:
            self.answer(False, portable(error))  # type: ignore[arg-type]
            return
        self.results[i] = part.result()
        self.remaining -= 1
        if self.remaining == 0:
            self.answer(True, self.results)

    def answer(self, ok: bool, value: Any) -> None:
        self.channel._send((REPLY, self.call_id, ok, value, _ran(self.info)))
        self.stop()

    def stop(self) -> None:
        """No answer (any more): the parts not done are cancelled (their queued items are skipped)."""
        self.remaining = -1
        self.channel._immediate.pop(self.call_id, None)
        for part in self.parts:
            part.cancel()
        self.parts.clear()

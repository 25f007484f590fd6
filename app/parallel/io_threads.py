"""A channel's socket read and written by two threads of their own (vLLM's engine core does its ZMQ input and
output so), so that the event loop neither decodes nor encodes frames nor makes their system calls: per
read chunk the loop gets one callback with every message decoded from it, and per loop pass it hands over
one list of messages to send."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import socket
import threading
from collections.abc import Callable

from app.core.threads import name_os_thread
from app.parallel import frames
from app.parallel.frames import HEADER, MAX_FRAME, BadFrame, Message

log = logging.getLogger(__name__)
READ_SIZE = 1 << 16  # bytes per recv: many frames at once under load


class IOThreads:
    """Threads for `sock` (a stream whose asyncio transport, if any, no longer reads or writes it).
    on_messages(messages) and on_end() run on `loop`; `initial`: bytes already read from the stream."""

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_messages: Callable[[list[Message]], None],
        on_end: Callable[[], None],
        initial: bytes = b"",
    ) -> None:
        self.sock, self.loop = sock, loop
        self.on_messages, self.on_end = on_messages, on_end
        self._out: queue.SimpleQueue[list[Message] | None] = queue.SimpleQueue()
        self._lock, self._running = threading.Lock(), 2
        self._reader = threading.Thread(target=self._read, args=(initial,), name="channel-read", daemon=True)
        self._writer = threading.Thread(target=self._write, name="channel-write", daemon=True)
        self._reader.start()
        self._writer.start()

    def send(self, messages: list[Message]) -> None:
        """Queue one frame's messages (from the loop; the writer thread encodes and sends them)."""
        self._out.put(messages)

    def close(self, last: list[Message] | None = None) -> None:
        """Send `last` (e.g. a "bye"), then end both threads: the peer sees the end of the stream."""
        if last:
            self._out.put(last)
        self._out.put(None)  # the writer shuts the socket down once it has sent what was queued

    def _read(self, initial: bytes) -> None:
        name_os_thread()
        buf = bytearray(initial)
        try:
            while True:
                messages: list[Message] = []
                while len(buf) >= HEADER.size:
                    (size,) = HEADER.unpack_from(buf)
                    if size > MAX_FRAME:
                        raise BadFrame(f"a frame of {size} bytes")
                    if len(buf) < HEADER.size + size:
                        break
                    messages += frames.decode(bytes(buf[HEADER.size : HEADER.size + size]))
                    del buf[: HEADER.size + size]
                if messages:
                    try:
                        self.loop.call_soon_threadsafe(self.on_messages, messages)
                    except RuntimeError:  # the loop has closed (its process is stopping): nobody reads
                        break
                chunk = self.sock.recv(READ_SIZE)
                if not chunk:
                    break
                buf += chunk
        except BadFrame:
            log.exception("a bad frame from the other process: closing the channel")
        except OSError:
            pass  # the stream has gone: its end, below
        finally:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self.loop.call_soon_threadsafe(self.on_end)
            self._done()

    def _write(self) -> None:
        name_os_thread()
        stop = False
        try:
            while not stop and (first := self._out.get()) is not None:
                messages = list(first)
                while True:  # what was queued meanwhile goes in the same write
                    try:
                        more = self._out.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    messages += more
                try:
                    data = frames.encode(messages)
                except Exception:  # a bug (a value that does not pickle): its callers time out, others go on
                    log.exception("could not encode %d message(s): dropped", len(messages))
                    continue
                self.sock.sendall(data)
        except OSError:
            pass  # the stream has gone; the reader sees its end
        finally:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader, and the peer reads the end
            self._done()

    def _done(self) -> None:
        """The last thread to end closes the socket (not before: its descriptor could be reused)."""
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self.sock.close()

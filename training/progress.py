"""How far a pull is: `python -m training pull --progress json` writes it as JSON lines for the program that
runs it (the server, pulling the models APP_MODELS names, shows them in /ready).

stdout then carries these lines only, one JSON object each, flushed as written; what is for people (the
verification's report, "wrote ...", the one-line error) goes to stderr. In order:

  {"phase": "resolve", "spec": "argos:fr-en"}                      what was asked for
  {"phase": "download", "file": "model.safetensors", "done": 1048576, "total": 300827685}
  {"phase": "check"}                                                importing, unpacking, verifying
  {"phase": "done", "checkpoint": "/abs/checkpoints/argos-fr-en", "source": "...", "version": "1.9"}
  {"phase": "error", "message": "..."}                              instead of "done": exit 1, stderr's line

"download": the bytes of one file so far (`total` null when the server does not say). Per file the first
event has the bytes it starts from (0, or what a resumed download already holds), the last one done == total,
and between them at most one every INTERVAL seconds; a file the hub cache already holds gets only the last.
The hub fetches several files at once, so their events interleave. Argos: "index.json" (the package index),
then the package's .argosmodel. "version": the hub commit, or the Argos package_version.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger(__name__)
INTERVAL = 0.25  # seconds between two download events of one file


@dataclass(frozen=True)
class Pulled:
    """What a pull wrote: the "done" event and the "wrote ..." line."""

    checkpoint: Path
    source: str  # ORG/NAME, or argos:SRC-TGT
    version: str  # the hub commit, or the Argos package_version
    note: str  # the rest of the "wrote" line: where from, its license


class Progress:
    """Events as JSON lines on `stream`; without one (the default, for people) byte counts are logged every
    10% and the other events are not shown."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self._files: dict[str, tuple[int, int | None, float]] = {}  # file -> (done, total, when shown)
        self._lock = threading.Lock()  # the hub's download threads report at once

    def event(self, phase: str, **fields: Any) -> None:
        if self.stream is not None:
            line = json.dumps({"phase": phase, **fields}, ensure_ascii=False)
            with self._lock:
                self.stream.write(line + "\n")
                self.stream.flush()

    def download(self, file: str, done: int, total: int | None) -> None:
        """`done` of `total` bytes of `file`: shown when it is the file's first or last (done == total) count,
        or INTERVAL after the last one shown; a count equal to the last one shown is not shown again."""
        now = time.monotonic()
        with self._lock:
            last = self._files.get(file)
            if last is not None and (
                last[:2] == (done, total) or (done != total and now - last[2] < INTERVAL)
            ):
                return
            self._files[file] = (done, total, now)
        if self.stream is not None:
            self.event("download", file=file, done=done, total=total)
        elif total and (last is None or done * 10 // total > last[0] * 10 // total):
            log.info("%s: %d%% of %.1f MB", file, done * 100 // total, total / 1e6)

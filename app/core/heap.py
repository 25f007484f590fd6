"""The cyclic garbage collector kept off what start-up built.

A server process imports FastAPI, pydantic, the app's routes and schemas (and torch where models run): some
hundreds of thousands of objects that live as long as the process. Each of the collector's full passes
walks all of them, and a request allocates enough containers (tasks, futures, dicts, closures) to set one
off every few hundred requests: up to a fifth of an HTTP process's CPU per request (BENCHMARKS.md, "The
machinery's ceiling"). gc.freeze() moves the objects alive at start-up out of its reach, as Instagram's
servers and CPython's documentation do; the collector goes on finding the cycles that requests leave.
"""

from __future__ import annotations

import gc


def freeze_startup() -> None:
    """Exempt every object alive now from the collector's later passes (they are still freed when nothing
    refers to them). No collection first: start-up leaves a few dozen objects in cycles, and one would cost
    a tenth of a second per process start. For a process's entry point only: it is process-wide."""
    gc.freeze()

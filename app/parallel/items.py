"""The kinds of batch items, batch keys and outputs a frame (app/parallel/frames.py) writes as columns: each
served task's (its `wire`, app/tasks/wire.py, in the order of app/tasks/served.py, the same in every process).
A job is written with the first kind whose items and key fit it (a job's kind is its index here, and an
attention request's greedy translation is a translation job); a job no kind fits, e.g. a plugin task's, sends
its whole message pickled."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from app.tasks.served import SERVED
from app.tasks.wire import Keys, Kind

WIRES = [task.wire for task in SERVED if task.wire is not None]
ITEMS: tuple[Kind, ...] = tuple(w.items for w in WIRES)
KEYS: tuple[Keys, ...] = tuple(w.keys for w in WIRES)  # the keys of ITEMS[i]'s jobs
# a job without items fits the first kind of each whose key fits: it decodes to [] whichever it was
OUTPUTS: tuple[Kind, ...] = tuple(w.outputs for w in WIRES)


def item_kind(values: list[Any], key: Hashable) -> int | None:
    """The index of the first kind whose items fit `values` and whose keys fit `key`; None when none does."""
    for i, kind in enumerate(ITEMS):
        if KEYS[i].fits(key) and kind.fits(values):
            return i
    return None


def output_kind(values: list[Any]) -> int | None:
    """The index of the first kind whose outputs fit `values`; None when none does."""
    for i, kind in enumerate(OUTPUTS):
        if kind.fits(values):
            return i
    return None

"""How a task's batch items, batch keys and outputs cross between the server's processes as columns
(app/core/columns.py): a task that `splits` names its kinds in `Task.wire`, beside its handlers, and a frame
(app/parallel/frames.py) writes each job with the kind that fits its values, all the jobs of one kind in a
frame at once. Values no served task's kind fits cross pickled (app/parallel/items.py lists the kinds)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple, Protocol

from app.core.columns import F64, I32, BadFrame, Reader, Writer, split

NO_KEY = -1  # a batch key None as a number (a real key's number is at least 0)
NO_LIMIT = -1  # an optional length (a Sentence's max_length, a hypothesis' alignment) that is None


class Kind(Protocol):
    """Items or outputs of one shape."""

    def fits(self, values: list[Any]) -> bool:
        """Whether one job's values (items, or outputs) have this kind's shape."""

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        """The columns of every job of this kind in a frame, in order."""

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        """Those jobs back, `sizes`: their value counts."""


class Keys(Protocol):
    """Batch keys as a number and a string (a job's row and its strings in a frame)."""

    def fits(self, key: Hashable) -> bool: ...

    def number(self, key: Hashable) -> int: ...

    def string(self, key: Hashable) -> str: ...

    def key(self, number: int, string: str) -> Hashable:
        """The key back; BadFrame for a number no key of this kind has."""


class Wire(NamedTuple):
    """A task's kinds: its items (with their batch keys) and their outputs."""

    items: Kind
    keys: Keys
    outputs: Kind


class NoKeys:
    """A task whose items need no batch key: None."""

    def fits(self, key: Hashable) -> bool:
        return key is None

    def number(self, key: Hashable) -> int:
        return NO_KEY

    def string(self, key: Hashable) -> str:
        return ""

    def key(self, number: int, string: str) -> Hashable:
        if number != NO_KEY:
            raise BadFrame(f"a batch key numbered {number} for items that take none")
        return None


class FloatRows:
    """Outputs that are rows of floats of one width per job (e.g. class probabilities), float64: bit for bit."""

    def fits(self, values: list[Any]) -> bool:
        width = None
        for row in values:
            if type(row) is not list or any(type(x) is not float for x in row):
                return False
            if len(row) != (width := len(row) if width is None else width):
                return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        w.column([len(rows[0]) if rows else 0 for rows in jobs], I32)
        w.column([x for rows in jobs for row in rows for x in row], F64)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        widths = r.column(I32, len(sizes))
        rows = split(r.column(F64), [n * w for n, w in zip(sizes, widths, strict=True)])
        return [split(flat, [w] * n) for flat, n, w in zip(rows, sizes, widths, strict=True)]


def write_runs(w: Writer, runs: list[list[int]], code: str = I32) -> None:
    """Lists of ints (e.g. token ids) as two columns: their lengths, then their values (as `code`)."""
    w.column([len(run) for run in runs], I32)
    w.column([x for run in runs for x in run], code)


def read_runs(r: Reader, n: int, code: str = I32) -> list[list[int]]:
    """`n` lists written by write_runs."""
    lengths = r.column(I32, n)
    return split(r.column(code), lengths)

"""Columns, the body of a compact frame section (app/parallel/frames.py; each task's kinds write theirs:
app/tasks/wire.py): each column is `!BI` (its type and its length) then its values as one buffer, in the machine's byte order (both ends run on one machine); a string
column is its strings' lengths in code points (an int32 column) then their UTF-8, encoded and decoded at once
(surrogates passed: any Python string fits, a NUL included); a record column is fixed-size struct records
(a call's id, deadline, flags and job count: one column, not four). A Reader takes the columns back in the
order a Writer wrote them, and raises BadFrame when a type, a length or the end differs. Numbers go through
array.array (cheaper than numpy for the short columns of a frame), float32 maps through numpy."""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence
from itertools import accumulate, pairwise
from typing import Any

import numpy as np

COLUMN = struct.Struct("!BI")  # a column's type (an index into TYPES, or TEXT, ROWS) and its count
I64, I32, U8, F64, F32 = "q", "i", "B", "d", "f"  # array.array's type codes
TYPES = (I64, I32, U8, F64, F32)
CODES = {code: i for i, code in enumerate(TYPES)}
TEXT = len(TYPES)  # a string column's UTF-8, its count in bytes
ROWS = TEXT + 1  # a column of fixed-size records (struct.Struct), its count in records
UTF8 = ("utf-8", "surrogatepass")  # a lone surrogate (JSON's "\ud800") round-trips too
assert (array(I64).itemsize, array(I32).itemsize) == (8, 4), "a platform whose C int is not 32 bits"


class BadFrame(ValueError):
    """Bytes that are not a frame of this module (a bug, or something else on the socket)."""


class Writer:
    """Columns appended in order; `data()` their bytes. A value the type cannot hold raises OverflowError or
    TypeError: the caller sends the messages another way."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def column(self, values: Iterable[Any], code: str) -> None:
        column = array(code, values)
        self.parts += (COLUMN.pack(CODES[code], len(column)), column.tobytes())

    def arrays(self, arrays: Sequence[np.ndarray]) -> None:
        """One float32 column of the arrays' values, each flattened, one after the other."""
        parts = [np.ascontiguousarray(a, np.float32) for a in arrays]
        self.parts += (
            COLUMN.pack(TYPES.index(F32), sum(a.size for a in parts)),
            *(a.tobytes() for a in parts),
        )

    def rows(self, record: struct.Struct, rows: Sequence[tuple[Any, ...]]) -> None:
        """A column of fixed-size records, one `record.pack(*row)` each (struct.error: a value it cannot hold)."""
        self.parts += (COLUMN.pack(ROWS, len(rows)), *(record.pack(*row) for row in rows))

    def strings(self, values: Iterable[str]) -> None:
        values = list(values)
        self.column(map(len, values), I32)
        data = "".join(values).encode(*UTF8)
        self.parts += (COLUMN.pack(TEXT, len(data)), data)

    def data(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """The columns of `view` in the order they were written."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.at = view, 0

    def _take(self, kind: int, itemsize: int, count: int | None) -> memoryview:
        if self.at + COLUMN.size > len(self.view):
            raise BadFrame("a column runs past the end of its section")
        found, n = COLUMN.unpack_from(self.view, self.at)
        if found != kind:
            raise BadFrame(f"a column of type {found} where type {kind} was expected")
        if count is not None and n != count:
            raise BadFrame(f"a column of {n} values where {count} were expected")
        start = self.at + COLUMN.size
        self.at = end = start + n * itemsize
        if end > len(self.view):
            raise BadFrame("a column runs past the end of its section")
        return self.view[start:end]

    def column(self, code: str, count: int | None = None) -> list[Any]:
        """The next column's values (`count`: how many it must have)."""
        column = array(code)
        column.frombytes(self._take(CODES[code], column.itemsize, count))
        return column.tolist()

    def rows(self, record: struct.Struct, count: int | None = None) -> list[tuple[Any, ...]]:
        """The next column of `record`s (`count`: how many it must have), each unpacked."""
        return list(record.iter_unpack(self._take(ROWS, record.size, count)))

    def floats32(self) -> np.ndarray:
        """The next column, a float32 one, as an array (read-only: a view of the frame)."""
        return np.frombuffer(self._take(CODES[F32], 4, None), np.float32)

    def strings(self, count: int | None = None) -> list[str]:
        lengths = self.column(I32, count)
        text = str(self._take(TEXT, 1, None), *UTF8)
        if sum(lengths) != len(text) or min(lengths, default=0) < 0:
            raise BadFrame("a string column's lengths do not match its text")
        return [text[a:b] for a, b in pairwise(accumulate(lengths, initial=0))]

    def end(self) -> None:
        if self.at != len(self.view):
            raise BadFrame(f"{len(self.view) - self.at} bytes left after a section's columns")


def split(flat: list[Any], lengths: Sequence[int]) -> list[list[Any]]:
    """`flat` cut into consecutive runs of `lengths` (BadFrame unless they add up to it)."""
    if sum(lengths) != len(flat) or min(lengths, default=0) < 0:
        raise BadFrame("a column's runs do not add up to its values")
    return [flat[a:b] for a, b in pairwise(accumulate(lengths, initial=0))]

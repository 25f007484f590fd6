"""Columns, the body of a compact frame section (app/parallel/frames.py): each column is `!BI` (its type and
its length) then its values as one buffer; a string column is its strings' byte lengths (an int32 column)
then their UTF-8 (surrogates passed: any Python string fits, a NUL included). A Reader takes the columns
back in the order a Writer wrote them, and raises BadFrame when a type, a length or the end differs."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

COLUMN = struct.Struct("!BI")  # a column's type (an index into TYPES, or BYTES) and its count
I64, I32, U8, F64, F32 = (np.dtype(t) for t in ("<i8", "<i4", "u1", "<f8", "<f4"))  # little-endian
TYPES = (I64, I32, U8, F64, F32)
BYTES = len(TYPES)  # a string column's UTF-8, its count in bytes
UTF8 = ("utf-8", "surrogatepass")  # a lone surrogate (JSON's "\ud800") round-trips too


class BadFrame(ValueError):
    """Bytes that are not a frame of this module (a bug, or something else on the socket)."""


class Writer:
    """Columns appended in order; `data()` their bytes. np.array raises (OverflowError, ValueError,
    TypeError) for values the type cannot hold: the caller sends the messages another way."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def column(self, values: Sequence[Any] | np.ndarray, dtype: np.dtype[Any]) -> None:
        array = np.array(values, dtype)
        self.parts += (COLUMN.pack(TYPES.index(dtype), len(array)), array.tobytes())

    def arrays(self, arrays: Sequence[np.ndarray], dtype: np.dtype[Any]) -> None:
        """One column of the arrays' values, each flattened, one after the other."""
        parts = [np.ascontiguousarray(a, dtype) for a in arrays]
        self.parts += (
            COLUMN.pack(TYPES.index(dtype), sum(a.size for a in parts)),
            *(a.tobytes() for a in parts),
        )

    def strings(self, values: Iterable[str]) -> None:
        data = [v.encode(*UTF8) for v in values]
        self.column([len(d) for d in data], I32)
        self.parts.append(COLUMN.pack(BYTES, sum(map(len, data))))
        self.parts += data

    def data(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """The columns of `view` in the order they were written."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.at = view, 0

    def _head(self, kind: int) -> int:
        if self.at + COLUMN.size > len(self.view):
            raise BadFrame("a column runs past the end of its section")
        found, count = COLUMN.unpack_from(self.view, self.at)
        if found != kind:
            raise BadFrame(f"a column of type {found} where type {kind} was expected")
        self.at += COLUMN.size
        return int(count)

    def array(self, dtype: np.dtype[Any], count: int | None = None) -> np.ndarray:
        """The next column (`count`: the length it must have)."""
        n = self._head(TYPES.index(dtype))
        if count is not None and n != count:
            raise BadFrame(f"a column of {n} values where {count} were expected")
        end = self.at + n * dtype.itemsize
        if end > len(self.view):
            raise BadFrame("a column runs past the end of its section")
        array, self.at = np.frombuffer(self.view, dtype, n, self.at), end
        return array

    def column(self, dtype: np.dtype[Any], count: int | None = None) -> list[Any]:
        return self.array(dtype, count).tolist()  # type: ignore[no-any-return]

    def strings(self, count: int | None = None) -> list[str]:
        lengths = self.column(I32, count)
        n = self._head(BYTES)
        if n != sum(lengths) or self.at + n > len(self.view) or min(lengths, default=0) < 0:
            raise BadFrame("a string column's lengths do not match its bytes")
        out, at = [], self.at
        for size in lengths:
            out.append(str(self.view[at : at + size], *UTF8))
            at += size
        self.at = at
        return out

    def end(self) -> None:
        if self.at != len(self.view):
            raise BadFrame(f"{len(self.view) - self.at} bytes left after a section's columns")


def split(flat: list[Any], lengths: Sequence[int]) -> list[list[Any]]:
    """`flat` cut into consecutive runs of `lengths` (BadFrame unless they add up to it)."""
    if sum(lengths) != len(flat) or min(lengths, default=0) < 0:
        raise BadFrame("a column's runs do not add up to its values")
    out, at = [], 0
    for n in lengths:
        out.append(flat[at : at + n])
        at += n
    return out

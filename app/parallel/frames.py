"""The bytes between the server's processes (app/parallel/channel.py): each event-loop pass's messages go in one
frame, `!I` its length then three sections, each `!I` its length first:

- SUBMITS: `submit` calls whose items are token ids (a classifier's (ids, text) items: /sentiment), columns
  of numbers as numpy buffers: per call its id, deadline, flags, request id, client, task name, field and jobs;
  per job its model, batch key (an index into the frame's distinct keys) and items; per item its cost (work
  units), its ids (int32, all items' concatenated) and text;
- OUTPUTS: successful replies whose value is, per job, one row of floats per item (class probabilities), all
  rows of a job one width: float64 (the values as they were, bit for bit), with the models and largest batch
  that ran the call;
- PICKLED: every other message (control calls and notes, errors, LEFT and CANCEL, other tasks' items), one
  pickled list.

A message either section cannot hold (an odd shape, a NUL in a string) goes pickled: the compact sections
are a fast path, never a limit. Decoding gives back the same tuples (Channel's messages); the compact ones
first, then the pickled ones in their order (a LEFT or CANCEL never precedes its call: a call is sent before
anything about it).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

HEADER = struct.Struct("!I")  # a frame's length in bytes (what follows the header)
SECTIONS = struct.Struct("!III")  # the sections' lengths: submits, outputs, pickled
COUNTS = struct.Struct("!IIII")  # a compact section's calls (or replies), jobs, items, and ids (or floats)
MAX_FRAME = 1 << 31  # a larger one is a bug or a foreign peer: refused
CALL, REPLY = 0, 1  # Channel's message kinds (LEFT, CANCEL and NOTE only ever go pickled)
SUBMIT = "submit"
NUL = "\x00"
WATCHED, WHO = 1, 2  # a call's flags: its caller watches its client; it names a request (id, client)

Message = tuple[Any, ...]


class BadFrame(ValueError):
    """Bytes that are not a frame of this module (a bug, or something else on the socket)."""


def encode(messages: Sequence[Message]) -> bytes:
    """One frame (its header included) holding `messages`."""
    submits, outputs, rest = [], [], []
    for m in messages:
        if m[0] == CALL and m[2] == SUBMIT and _submit_fits(m):
            submits.append(m)
        elif m[0] == REPLY and m[2] is True and _outputs_fit(m[3]):
            outputs.append(m)
        else:
            rest.append(m)
    a = _encode_submits(submits) if submits else b""
    if a is None:  # a NUL in a string: pickled instead
        a, rest = b"", submits + rest
    b = _encode_outputs(outputs) if outputs else b""
    if b is None:
        b, rest = b"", outputs + rest
    c = pickle.dumps(rest, protocol=pickle.HIGHEST_PROTOCOL) if rest else b""
    body = b"".join((SECTIONS.pack(len(a), len(b), len(c)), a, b, c))
    return HEADER.pack(len(body)) + body


def decode(body: bytes | memoryview) -> list[Message]:
    """The messages of one frame's body (the bytes after its header); BadFrame when they are not one."""
    try:
        la, lb, lc = SECTIONS.unpack_from(body)
        if SECTIONS.size + la + lb + lc != len(body):
            raise BadFrame(f"section lengths {la}+{lb}+{lc} do not add up to the frame's {len(body)} bytes")
        view, at = memoryview(body), SECTIONS.size
        out = _decode_submits(view[at : at + la]) if la else []
        at += la
        if lb:
            out += _decode_outputs(view[at : at + lb])
        at += lb
        if lc:
            rest = pickle.loads(view[at : at + lc])
            if not isinstance(rest, list):
                raise BadFrame("the pickled section is not a list")
            out += rest
        return out
    except BadFrame:
        raise
    except Exception as e:  # truncated buffers, bad utf-8, a broken pickle: all the same to the reader
        raise BadFrame(f"{type(e).__name__}: {e}") from e


# --- submit calls: (CALL, id, "submit", (task, [(model, key, items, costs)], deadline, field), {}, who, watched)


def _submit_fits(m: Message) -> bool:
    """Whether a submit call has the compact shape: classifier items ([int], str), no keyword arguments."""
    args, kwargs = m[3], m[4]
    if kwargs or len(args) != 4 or not isinstance(args[0], str) or not isinstance(args[3], str):
        return False
    try:
        for model, key, items, costs in args[1]:
            if not isinstance(model, str) or not isinstance(key, Hashable):
                return False
            if type(costs) is not list or len(costs) != len(items) or any(type(c) is not int for c in costs):
                return False
            for item in items:
                if type(item) is not tuple or len(item) != 2 or type(item[0]) is not list:
                    return False
                if type(item[1]) is not str:
                    return False
    except (TypeError, ValueError):
        return False
    return True


def _encode_submits(calls: list[Message]) -> bytes | None:
    ids, deadlines, flags, njobs = [], [], [], []
    job_items, job_keys, costs, lengths, tokens = [], [], [], [], []
    strings: list[str] = []
    keys: dict[Hashable, int] = {}
    for _, call_id, _, (task, jobs, deadline, field), _, who, watched in calls:
        ids.append(call_id)
        deadlines.append(deadline)
        flags.append((WATCHED if watched else 0) | (WHO if who else 0))
        njobs.append(len(jobs))
        strings += (task, field, *(who or ()))
        for model, key, items, job_costs in jobs:
            strings.append(model)
            job_keys.append(keys.setdefault(key, len(keys)))
            job_items.append(len(items))
            costs += job_costs
            for item_ids, text in items:
                lengths.append(len(item_ids))
                tokens += item_ids
                strings.append(text)
    text = NUL.join(strings)
    if text.count(NUL) != len(strings) - 1:
        return None
    try:
        numbers = [
            np.array(ids, np.int64), np.array(deadlines, np.float64), np.array(flags, np.uint8),
            np.array(njobs, np.int32), np.array(job_items, np.int32), np.array(job_keys, np.int32),
            np.array(costs, np.int64), np.array(lengths, np.int32), np.array(tokens, np.int32),
        ]  # fmt: skip
    except OverflowError:  # an id beyond int32 (not a token id this module carries), a cost beyond int64
        return None
    packed_keys = pickle.dumps(list(keys), protocol=pickle.HIGHEST_PROTOCOL)  # distinct keys, not per call
    return _join(COUNTS.pack(len(ids), len(job_items), len(lengths), len(tokens)), numbers, packed_keys, text)


def _decode_submits(view: memoryview) -> list[Message]:
    n, j, i, t = COUNTS.unpack_from(view)
    at = COUNTS.size
    ids, at = _take(view, at, np.int64, n)
    deadlines, at = _take(view, at, np.float64, n)
    flags, at = _take(view, at, np.uint8, n)
    njobs, at = _take(view, at, np.int32, n)
    job_items, at = _take(view, at, np.int32, j)
    job_keys, at = _take(view, at, np.int32, j)
    costs, at = _take(view, at, np.int64, i)
    lengths, at = _take(view, at, np.int32, i)
    tokens, at = _take(view, at, np.int32, t)
    keys, strings = _tail(view, at)
    if sum(njobs) != j or sum(job_items) != i or sum(lengths) != t:
        raise BadFrame("a submit section's counts do not match its columns")
    s = iter(strings)
    out: list[Message] = []
    jk = jt = p = 0
    for call_id, deadline, flag, nj in zip(ids, deadlines, flags, njobs, strict=True):
        task, field = next(s), next(s)
        who = (next(s), next(s)) if flag & WHO else None
        jobs = []
        for _ in range(nj):
            model, key = next(s), keys[job_keys[jk]]
            items, first = [], jt
            for _ in range(job_items[jk]):
                q = p + lengths[jt]
                items.append((tokens[p:q], next(s)))
                p, jt = q, jt + 1
            jobs.append((model, key, items, costs[first:jt]))
            jk += 1
        out.append((CALL, call_id, SUBMIT, (task, jobs, deadline, field), {}, who, bool(flag & WATCHED)))
    if next(s, None) is not None:
        raise BadFrame("a submit section has strings left over")
    return out


# --- their replies: (REPLY, id, True, [per job: [per item: [float, ...]]], (models, batch size)) ---------


def _outputs_fit(value: Any) -> bool:
    """Whether a reply's value is, per job, rows of floats of one width."""
    if type(value) is not list:
        return False
    for rows in value:
        if type(rows) is not list:
            return False
        width = None
        for row in rows:
            if type(row) is not list or any(type(x) is not float for x in row):
                return False
            if len(row) != (width := len(row) if width is None else width):
                return False
    return True


def _encode_outputs(replies: list[Message]) -> bytes | None:
    ids, njobs, batch, nmodels, job_rows, widths, values = [], [], [], [], [], [], []
    strings: list[str] = []
    for _, call_id, _, value, (models, batch_size) in replies:
        ids.append(call_id)
        njobs.append(len(value))
        batch.append(batch_size)
        nmodels.append(len(models))
        strings += models
        for rows in value:
            job_rows.append(len(rows))
            widths.append(len(rows[0]) if rows else 0)
            for row in rows:
                values += row
    text = NUL.join(strings)
    if text.count(NUL) != max(0, len(strings) - 1):
        return None
    numbers = [
        np.array(ids, np.int64), np.array(njobs, np.int32), np.array(batch, np.int32),
        np.array(nmodels, np.int32), np.array(job_rows, np.int32), np.array(widths, np.int32),
        np.array(values, np.float64),
    ]  # fmt: skip
    counts = COUNTS.pack(len(ids), len(job_rows), len(strings), len(values))
    return _join(counts, numbers, b"", text)


def _decode_outputs(view: memoryview) -> list[Message]:
    n, j, m, v = COUNTS.unpack_from(view)
    at = COUNTS.size
    ids, at = _take(view, at, np.int64, n)
    njobs, at = _take(view, at, np.int32, n)
    batch, at = _take(view, at, np.int32, n)
    nmodels, at = _take(view, at, np.int32, n)
    job_rows, at = _take(view, at, np.int32, j)
    widths, at = _take(view, at, np.int32, j)
    values, at = _take(view, at, np.float64, v)
    _, strings = _tail(view, at)
    if m == 0:
        strings = []
    floats = sum(r * w for r, w in zip(job_rows, widths, strict=True))
    if sum(njobs) != j or sum(nmodels) != len(strings) or floats != v:
        raise BadFrame("an output section's counts do not match its columns")
    out: list[Message] = []
    jk = p = s = 0
    for call_id, nj, size, nm in zip(ids, njobs, batch, nmodels, strict=True):
        value = []
        for _ in range(nj):
            w, rows = widths[jk], []
            for _ in range(job_rows[jk]):
                rows.append(values[p : p + w])
                p += w
            value.append(rows)
            jk += 1
        out.append((REPLY, call_id, True, value, (strings[s : s + nm], size)))
        s += nm
    return out


# --- columns ------------------------------------------------------------------------------------------


def _join(counts: bytes, numbers: list[np.ndarray], packed: bytes, text: str) -> bytes:
    """counts, the columns' buffers (their lengths follow from counts), `!I` + packed, `!I` + the strings."""
    data = text.encode()
    head = (HEADER.pack(len(packed)), packed, HEADER.pack(len(data)), data)
    return b"".join([counts, *(a.tobytes() for a in numbers), *head])


def _take(view: memoryview, at: int, dtype: type, count: int) -> tuple[list[Any], int]:
    size = np.dtype(dtype).itemsize * count
    if at + size > len(view):
        raise BadFrame("a column runs past the end of its section")
    return np.frombuffer(view, dtype, count, at).tolist(), at + size


def _tail(view: memoryview, at: int) -> tuple[list[Any], list[str]]:
    """The pickled keys (none when empty) and the NUL-separated strings that end a compact section."""
    (size,) = HEADER.unpack_from(view, at)
    keys = pickle.loads(view[at + HEADER.size : at + HEADER.size + size]) if size else []
    at += HEADER.size + size
    (size,) = HEADER.unpack_from(view, at)
    at += HEADER.size
    if at + size != len(view):
        raise BadFrame("a compact section's strings do not end it")
    return keys, bytes(view[at:]).decode().split(NUL)

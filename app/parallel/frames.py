"""The bytes between the server's processes (app/parallel/channel.py): each event-loop pass's messages go in one
frame, `!I` its length then three sections, each `!I` its length first:

- SUBMITS: `submit` calls (a request's batch items: app/parallel/items.py), as columns of numbers and
  strings (app/core/columns.py): per call its id, deadline, flags, request id, client, task name and
  field; per job its model, batch key and item kind; per item its cost (work units, int64); then each kind's
  items, as its task writes them (app/tasks/wire.py: e.g. token ids, int32, all items' concatenated; a
  translation's decoding options, one column each);
- OUTPUTS: successful replies whose value is, per job, one output per item of a known kind (class
  probabilities as float64 rows, bit for bit; n-best hypotheses), with the models and largest batch that
  ran the call;
- PICKLED: every other message, one pickled list: control calls and notes (hello, state, metrics), errors,
  LEFT and CANCEL, a whole `answer` call (a task that does not split), and a submit or reply of a shape no
  kind holds (another task's items).

Nothing in the compact sections is pickled, and a string of any content fits them: they carry the items a
client's request becomes. Decoding gives back the same tuples (Channel's messages); the compact ones first,
then the pickled ones in their order (a LEFT or CANCEL never precedes its call: a call is sent before
anything about it).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from typing import Any

from app.core.columns import I64, BadFrame, Reader, Writer, split
from app.parallel.items import ITEMS, KEYS, OUTPUTS, item_kind, output_kind
from app.tasks.wire import Kind

HEADER = struct.Struct("!I")  # a frame's length in bytes (what follows the header)
SECTIONS = struct.Struct("!III")  # the sections' lengths: submits, outputs, pickled
MAX_FRAME = 1 << 31  # a larger one is a bug or a foreign peer: refused
CALL, REPLY = 0, 1  # Channel's message kinds (LEFT, CANCEL and NOTE only ever go pickled)
SUBMIT = "submit"
WATCHED, WHO = 1, 2  # a call's flags: its caller watches its client; it names a request (id, client)
UNFIT = (OverflowError, TypeError, struct.error)  # a value a column's type cannot hold: sent pickled
CALL_ROW = struct.Struct("<qdBi")  # a submit call's id, deadline, flags and job count
JOB_ROW = struct.Struct("<Bii")  # a job's item kind, item count and batch key number (its kind's Keys)
REPLY_ROW = struct.Struct("<qiii")  # a reply's call id, job count, batch size and model count
OUTPUT_ROW = struct.Struct("<Bi")  # a job's output kind and output count

Message = tuple[Any, ...]
__all__ = ["BadFrame", "HEADER", "MAX_FRAME", "Message", "decode", "encode"]


def encode(messages: Sequence[Message]) -> bytes:
    """One frame (its header included) holding `messages`."""
    submits, outputs, rest = [], [], []
    for m in messages:
        if m[0] == CALL and m[2] == SUBMIT and (kinds := _submit_kinds(m)) is not None:
            submits.append((m, kinds))
        elif m[0] == REPLY and m[2] is True and (kinds := _output_kinds(m[3])) is not None:
            outputs.append((m, kinds))
        else:
            rest.append(m)
    a, b = _compact(_encode_submits, submits, rest), _compact(_encode_outputs, outputs, rest)
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
        out = _decode_submits(Reader(view[at : at + la])) if la else []
        at += la
        if lb:
            out += _decode_outputs(Reader(view[at : at + lb]))
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


def _compact(encode: Any, found: list[tuple[Message, list[int]]], rest: list[Message]) -> bytes:
    """A compact section of `found`; empty, and `found` pickled (prepended to `rest`), when a value does
    not fit its column's type."""
    if not found:
        return b""
    try:
        return encode(found)  # type: ignore[no-any-return]
    except UNFIT:
        rest[:0] = [m for m, _ in found]
        return b""


def _write_kinds(w: Writer, kinds: tuple[Kind, ...], jobs: list[tuple[int, list[Any]]]) -> None:
    """The columns of each kind that has jobs (in the kinds' order), over its jobs in order."""
    by_kind: dict[int, list[list[Any]]] = {}
    for k, values in jobs:
        by_kind.setdefault(k, []).append(values)
    for k in sorted(by_kind):
        kinds[k].write(w, by_kind[k])


def _read_kinds(r: Reader, kinds: tuple[Kind, ...], job_kinds: list[int], sizes: list[int]) -> list[Any]:
    """Per job its values, from the columns of each kind that has jobs."""
    by_kind: dict[int, list[int]] = {}
    for k, n in zip(job_kinds, sizes, strict=True):
        by_kind.setdefault(k, []).append(n)
    if any(not 0 <= k < len(kinds) for k in by_kind):
        raise BadFrame("a job of no known kind")
    read = {k: iter(kinds[k].read(r, by_kind[k])) for k in sorted(by_kind)}
    return [next(read[k]) for k in job_kinds]


# --- submit calls: (CALL, id, "submit", (task, [(model, key, items, costs)], deadline, field), {}, who, watched)


def _submit_kinds(m: Message) -> list[int] | None:
    """Its jobs' item kinds when a submit call has the compact shape (no keyword arguments), else None."""
    args, kwargs = m[3], m[4]
    if kwargs or len(args) != 4 or type(args[0]) is not str or type(args[3]) is not str:
        return None
    who = m[5]
    if who is not None and not (len(who) == 2 and type(who[0]) is str and type(who[1]) is str):
        return None
    kinds = []
    try:
        for model, key, values, costs in args[1]:
            if type(model) is not str or type(values) is not list:
                return None
            if type(costs) is not list or len(costs) != len(values) or any(type(c) is not int for c in costs):
                return None
            if (kind := item_kind(values, key)) is None:
                return None
            kinds.append(kind)
    except (TypeError, ValueError):
        return None
    return kinds


def _encode_submits(calls: list[tuple[Message, list[int]]]) -> bytes:
    w, strings, jobs, job_rows, costs = Writer(), [], [], [], []
    w.rows(
        CALL_ROW,
        [(m[1], m[3][2], (WATCHED if m[6] else 0) | (WHO if m[5] else 0), len(kinds)) for m, kinds in calls],
    )  # id, deadline, flags, jobs
    for (_, _, _, (task, wire, _, field), _, who, _), kinds in calls:
        strings += (task, field, *(who or ()))
        for (model, key, values, job_costs), kind in zip(wire, kinds, strict=True):
            strings += (model, KEYS[kind].string(key))
            job_rows.append((kind, len(values), KEYS[kind].number(key)))
            jobs.append((kind, values))
            costs += job_costs
    w.rows(JOB_ROW, job_rows)
    w.strings(strings)
    w.column(costs, I64)
    _write_kinds(w, ITEMS, jobs)
    return w.data()


def _decode_submits(r: Reader) -> list[Message]:
    calls = r.rows(CALL_ROW)
    job_rows = r.rows(JOB_ROW, sum(c[3] for c in calls))
    s = iter(r.strings(2 * len(calls) + 2 * sum(bool(c[2] & WHO) for c in calls) + 2 * len(job_rows)))
    costs = r.column(I64, sum(j[1] for j in job_rows))
    values = iter(_read_kinds(r, ITEMS, [j[0] for j in job_rows], [j[1] for j in job_rows]))  # kinds checked
    r.end()
    out: list[Message] = []
    job, at = iter(job_rows), 0
    for call_id, deadline, flag, nj in calls:
        task, field = next(s), next(s)
        who = (next(s), next(s)) if flag & WHO else None
        jobs = []
        for _ in range(nj):
            model, (kind, size, key) = next(s), next(job)
            jobs.append((model, KEYS[kind].key(key, next(s)), next(values), costs[at : at + size]))
            at += size
        out.append((CALL, call_id, SUBMIT, (task, jobs, deadline, field), {}, who, bool(flag & WATCHED)))
    return out


# --- their replies: (REPLY, id, True, [per job: [per item: its output]], (models, batch size)) -----------


def _output_kinds(value: Any) -> list[int] | None:
    """Its jobs' output kinds when a reply's value is, per job, a list of outputs of a known kind."""
    if type(value) is not list or any(type(v) is not list for v in value):
        return None
    kinds = [output_kind(v) for v in value]
    return None if None in kinds else kinds  # type: ignore[return-value]


def _encode_outputs(replies: list[tuple[Message, list[int]]]) -> bytes:
    w, jobs = Writer(), []
    w.rows(REPLY_ROW, [(m[1], len(kinds), m[4][1], len(m[4][0])) for m, kinds in replies])
    w.strings(model for m, _ in replies for model in m[4][0])
    for m, kinds in replies:
        jobs += zip(kinds, m[3], strict=True)
    w.rows(OUTPUT_ROW, [(k, len(values)) for k, values in jobs])
    _write_kinds(w, OUTPUTS, jobs)
    return w.data()


def _decode_outputs(r: Reader) -> list[Message]:
    replies = r.rows(REPLY_ROW)  # id, jobs, batch size, models
    models = split(r.strings(sum(x[3] for x in replies)), [x[3] for x in replies])
    job_rows = r.rows(OUTPUT_ROW, sum(x[1] for x in replies))
    outputs = _read_kinds(r, OUTPUTS, [j[0] for j in job_rows], [j[1] for j in job_rows])
    values = split(outputs, [x[1] for x in replies])
    r.end()
    return [
        (REPLY, x[0], True, value, (names, x[2]))
        for x, value, names in zip(replies, values, models, strict=True)
    ]

"""The batch items, batch keys and outputs that cross between the processes as columns (app/parallel/columns.py),
one kind per shape: a frame (app/parallel/frames.py) names each job's kind, and each kind writes the columns of
all its jobs in the frame at once. A job whose values no kind `fits` sends its whole message pickled.

Items: a classifier's (ids, text) (/sentiment; the text only for an n-gram head, else ""), a translator's
Sentence without its text side (`source` stays where the answer runs: the model process reads ids, options,
`align` and `passes`). Keys: None, or a DecodeKey. Outputs: rows of floats of one width (class
probabilities: float64, bit for bit), or n-best Hypothesis lists (token ids, scores, alignments).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

from app.parallel.columns import F64, I32, U8, BadFrame, Reader, Writer, split
from app.tasks.handlers import DecodeKey, Sentence
from model.options import Hypothesis

NONE_KEY, DECODE_KEY = 0, 1
NO_LIMIT = -1  # a Sentence's max_length None; an alignment None


class Kind(Protocol):
    def fits(self, values: list[Any]) -> bool:
        """Whether one job's values (items, or outputs) have this kind's shape."""

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        """The columns of every job of this kind in a frame, in order."""

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        """Those jobs back, `sizes`: their value counts."""


class ClassifierItems:
    def fits(self, values: list[Any]) -> bool:
        return all(
            type(v) is tuple and len(v) == 2 and type(v[0]) is list and type(v[1]) is str for v in values
        )

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items = [item for job in jobs for item in job]
        w.column([len(ids) for ids, _ in items], I32)
        w.column([t for ids, _ in items for t in ids], I32)
        w.strings(text for _, text in items)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        lengths = r.column(I32, sum(sizes))
        ids = split(r.column(I32), lengths)
        return split([*zip(ids, r.strings(len(ids)), strict=True)], sizes)


class Sentences:
    def fits(self, values: list[Any]) -> bool:
        return all(type(v) is Sentence and type(v.ids) is list for v in values)

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items: list[Sentence] = [item for job in jobs for item in job]
        w.column([len(s.ids) for s in items], I32)
        w.column([t for s in items for t in s.ids], I32)
        w.column([s.num_hypotheses for s in items], I32)
        w.column([s.length_penalty for s in items], F64)
        w.column([NO_LIMIT if s.max_length is None else s.max_length for s in items], I32)
        w.column([s.align for s in items], U8)
        w.column([s.passes for s in items], U8)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        n = sum(sizes)
        lengths = r.column(I32, n)
        ids = split(r.column(I32), lengths)
        columns = (r.column(I32, n), r.column(F64, n), r.column(I32, n), r.column(U8, n), r.column(U8, n))
        items = [
            Sentence(s, k, lp, None if ml == NO_LIMIT else ml, a, bool(p))
            for s, k, lp, ml, a, p in zip(ids, *columns, strict=True)
        ]
        return split(items, sizes)


class FloatRows:
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


class Hypotheses:
    def fits(self, values: list[Any]) -> bool:
        for hyps in values:
            if type(hyps) is not list:
                return False
            for h in hyps:
                if type(h) is not Hypothesis or type(h.tokens) is not list:
                    return False
                if h.alignment is not None and type(h.alignment) is not list:
                    return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        n_best: list[list[Hypothesis]] = [hyps for job in jobs for hyps in job]
        hyps = [h for n in n_best for h in n]
        w.column([len(n) for n in n_best], I32)
        w.column([len(h.tokens) for h in hyps], I32)
        w.column([t for h in hyps for t in h.tokens], I32)
        w.column([h.score for h in hyps], F64)
        w.column([h.log_prob for h in hyps], F64)
        w.column([NO_LIMIT if h.alignment is None else len(h.alignment) for h in hyps], I32)
        w.column([p for h in hyps if h.alignment is not None for p in h.alignment], I32)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        counts = r.column(I32, sum(sizes))
        n = sum(counts)
        lengths = r.column(I32, n)
        tokens = split(r.column(I32), lengths)
        scores, log_probs, aligned = r.column(F64, n), r.column(F64, n), r.column(I32, n)
        if min(aligned, default=0) < NO_LIMIT:
            raise BadFrame("an alignment of negative length")
        found = iter(split(r.column(I32), [a for a in aligned if a != NO_LIMIT]))
        hyps = [
            Hypothesis(t, s, lp, None if a == NO_LIMIT else next(found))
            for t, s, lp, a in zip(tokens, scores, log_probs, aligned, strict=True)
        ]
        return split(split(hyps, counts), sizes)


ITEMS: tuple[Kind, ...] = (ClassifierItems(), Sentences())
OUTPUTS: tuple[Kind, ...] = (FloatRows(), Hypotheses())  # [] of no item fits the first: one form either way


def kind_of(kinds: tuple[Kind, ...], values: list[Any]) -> int | None:
    """The index of the first kind that fits `values`, None when none does."""
    return next((i for i, kind in enumerate(kinds) if kind.fits(values)), None)


def key_fits(key: Hashable) -> bool:
    return key is None or (type(key) is DecodeKey and type(key.target_lang) is str)


def write_keys(w: Writer, keys: list[Hashable]) -> None:
    """Per key: its kind, its number (beam size) and its string (target language); None: 0 and ""."""
    decode = [k if isinstance(k, DecodeKey) else None for k in keys]
    w.column([NONE_KEY if k is None else DECODE_KEY for k in decode], U8)
    w.column([0 if k is None else k.beam_size for k in decode], I32)
    w.strings("" if k is None else k.target_lang for k in decode)


def read_keys(r: Reader, n: int) -> list[Hashable]:
    kinds, numbers, strings = r.column(U8, n), r.column(I32, n), r.strings(n)
    if any(k not in (NONE_KEY, DECODE_KEY) for k in kinds):
        raise BadFrame("a batch key of no known kind")
    return [
        None if k == NONE_KEY else DecodeKey(s, b) for k, b, s in zip(kinds, numbers, strings, strict=True)
    ]

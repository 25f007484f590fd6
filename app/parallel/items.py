"""The batch items, batch keys and outputs that cross between the processes as columns (app/parallel/columns.py),
one kind per shape: a frame (app/parallel/frames.py) names each job's kind, and each kind writes the columns of
all its jobs in the frame at once. A job whose values no kind `fits` sends its whole message pickled.

Items: a classifier's (ids, text) (/sentiment; the text only for an n-gram head, else ""), a translator's
Sentence without its text side (`source` stays where the answer runs: the model process reads ids, options,
`align` and `passes`), an AttentionItem (ids, the selected layers and heads). Keys: None, or a DecodeKey.
Outputs: rows of floats of one width (class probabilities: float64, bit for bit), n-best Hypothesis lists
(token ids, scores, alignments), or TextMaps (float32 arrays, as computed).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np

from app.parallel.columns import F64, I32, U8, BadFrame, Reader, Writer, split
from app.tasks.attention_maps import AttentionItem, LayerSelection, TextMaps
from app.tasks.handlers import DecodeKey, Sentence
from model.options import Hypothesis

NO_KEY = -1  # a batch key None (a DecodeKey's beam size is at least 1)
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
        for v in values:
            if not (type(v) is tuple and len(v) == 2 and type(v[0]) is list and type(v[1]) is str):
                return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items = [item for job in jobs for item in job]
        w.column([len(ids) for ids, _ in items], I32)
        w.column([t for ids, _ in items for t in ids], I32)
        w.strings(text for _, text in items)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        ids = _runs(r, sum(sizes))
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
        ids = _runs(r, n)
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
        tokens = _runs(r, n)
        scores, log_probs, aligned = r.column(F64, n), r.column(F64, n), r.column(I32, n)
        if min(aligned, default=0) < NO_LIMIT:
            raise BadFrame("an alignment of negative length")
        found = iter(split(r.column(I32), [a for a in aligned if a != NO_LIMIT]))
        hyps = [
            Hypothesis(t, s, lp, None if a == NO_LIMIT else next(found))
            for t, s, lp, a in zip(tokens, scores, log_probs, aligned, strict=True)
        ]
        return split(split(hyps, counts), sizes)


class AttentionItems:
    def fits(self, values: list[Any]) -> bool:
        return all(
            type(v) is AttentionItem
            and type(v.source) is list
            and (v.target is None or type(v.target) is list)
            and type(v.select) is LayerSelection
            for v in values
        )

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items: list[AttentionItem] = [item for job in jobs for item in job]
        sels = [item.select for item in items]
        assert all(sel is not None for sel in sels)  # fits
        w.column([len(v.source) for v in items], I32)
        w.column([t for v in items for t in v.source], I32)
        w.column([NO_LIMIT if v.target is None else len(v.target) for v in items], I32)
        w.column([t for v in items for t in v.target or ()], I32)
        for part in ("encoder", "decoder", "heads"):
            lists = [getattr(sel, part) for sel in sels]
            w.column([len(x) for x in lists], I32)
            w.column([i for x in lists for i in x], I32)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        n = sum(sizes)
        sources = _runs(r, n)
        lengths = r.column(I32, n)
        found = iter(split(r.column(I32), [t for t in lengths if t != NO_LIMIT]))
        targets = [None if t == NO_LIMIT else next(found) for t in lengths]
        parts = [_runs(r, n) for _ in range(3)]  # encoder layers, decoder layers, heads
        items = [
            AttentionItem(s, t, LayerSelection(*sel))
            for s, t, *sel in zip(sources, targets, *parts, strict=True)
        ]
        return split(items, sizes)


class AttentionMaps:
    def fits(self, values: list[Any]) -> bool:
        for v in values:
            if type(v) is not TextMaps or (v.decoder is None) != (v.cross is None):
                return False
            if any(type(a) is not np.ndarray or a.dtype != np.float32 or a.ndim != 4 for a in _arrays(v)):
                return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        maps: list[TextMaps] = [m for job in jobs for m in job]
        arrays = [a for m in maps for a in _arrays(m)]
        w.column([m.decoder is not None for m in maps], U8)
        w.column([d for a in arrays for d in a.shape], I32)
        w.arrays(arrays)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        full = r.column(U8, sum(sizes))
        shapes = split(r.column(I32, 4 * (len(full) + 2 * sum(full))), [4] * (len(full) + 2 * sum(full)))
        data = r.floats32()
        counts = [int(np.prod(shape)) for shape in shapes]
        if sum(counts) != len(data) or min((d for s in shapes for d in s), default=0) < 0:
            raise BadFrame("attention maps' shapes do not match their values")
        starts = np.cumsum([0, *counts])
        arrays = iter(data[a:b].reshape(s) for a, b, s in zip(starts, starts[1:], shapes, strict=True))
        maps = [TextMaps(next(arrays), *((next(arrays), next(arrays)) if f else ())) for f in full]
        return split(maps, sizes)


def _runs(r: Reader, n: int) -> list[list[int]]:
    """n lists of ints: their lengths, then their values (two columns)."""
    lengths = r.column(I32, n)
    return split(r.column(I32), lengths)


def _arrays(maps: TextMaps) -> list[np.ndarray]:
    """A classifier's one stack, or a translator's three."""
    return [a for a in (maps.encoder, maps.decoder, maps.cross) if a is not None]


ITEMS: tuple[Kind, ...] = (ClassifierItems(), Sentences(), AttentionItems())
# a job without items fits the first kind of each: it decodes to [] whichever it was
OUTPUTS: tuple[Kind, ...] = (FloatRows(), Hypotheses(), AttentionMaps())


def kind_of(kinds: tuple[Kind, ...], values: list[Any]) -> int | None:
    """The index of the first kind that fits `values`, None when none does."""
    for i, kind in enumerate(kinds):
        if kind.fits(values):
            return i
    return None


def key_fits(key: Hashable) -> bool:
    return key is None or (type(key) is DecodeKey and type(key.target_lang) is str)


def key_number(key: Hashable) -> int:
    """A batch key as a number and a string: None is (NO_KEY, ""), a DecodeKey its beam size and language."""
    return key.beam_size if isinstance(key, DecodeKey) else NO_KEY


def key_string(key: Hashable) -> str:
    return key.target_lang if isinstance(key, DecodeKey) else ""


def key(number: int, string: str) -> Hashable:
    if number == NO_KEY:
        return None
    if number < 1:
        raise BadFrame(f"a batch key numbered {number}")
    return DecodeKey(string, number)

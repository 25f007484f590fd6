"""The frames between the server's processes (app/parallel/frames.py and items.py, app/core/columns.py, each
task's kinds: app/tasks/wire.py): what goes in comes out, the compact sections hold what they claim to (a
translation's items and hypotheses too, never pickled), and bytes that are not a frame are refused."""

from __future__ import annotations

import math
import pickle
import struct
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from app.core.columns import COLUMN
from app.core.errors import QueueFull
from app.parallel import frames, items
from app.parallel.channel import CALL, CANCEL, LEFT, NOTE, REPLY, portable
from app.parallel.frames import HEADER, SECTIONS, BadFrame
from app.tasks.attention_maps import AttentionItem, LayerSelection, TextMaps
from app.tasks.handlers import DecodeKey, Sentence
from app.tasks.sentiment import SentimentTask
from app.tasks.served import SERVED
from app.tasks.translation import TranslationTask
from model.ngram_text import NO_NGRAM, NgramText
from model.options import Hypothesis
from model.unknowns import ALIGN_ALL, ALIGN_UNKNOWNS, Source

SUBMIT = (
    CALL, 7, "submit",
    ("sentiment", [("sentiment-en", None, [([5, 9, 2], NO_NGRAM), ([2**31 - 1, 0], NgramText([2**32 - 1, 0], " a text é "))], [3, 2**40])], 123.25,
     "texts"),
    {}, ("rid-1", "10.0.0.7"), True,
)  # fmt: skip
OUTPUT = (REPLY, 7, True, [[[0.1, 0.9], [1 / 3, 2 / 3]], [[0.25, 0.5, 0.25]]], (["sentiment-en", "m2"], 17))

SOURCE = Source([7, 8, 2], ("Prix", " 15 €", ""), ((1, "€"),))  # a text side: never crosses
SENTENCES = [
    Sentence([7, 8, 2], 3, 0.6, None, ALIGN_ALL, source=SOURCE),
    Sentence([2], passes=True, source=Source([2], ("",), verbatim="15 €")),  # passes: no decoding
    Sentence([0, 2**31 - 1, 2], 1, 0.0, 512, ALIGN_UNKNOWNS),
    Sentence([], 16, 2.0, 1),
]
TRANSLATE = (
    CALL, 11, "submit",
    ("translation", [("m1", DecodeKey("fr", 16), SENTENCES, [3, 1, 3, 0]), ("m2", DecodeKey("en", 1), [], [])],
     1e9, "q"),
    {}, ("rid-2", "::1"), True,
)  # fmt: skip
N_BEST = [
    Hypothesis([4, 5, 6], -0.5, -1.25, [0, 0, 1]),  # aligned
    Hypothesis([4, 2**31 - 1], -math.inf, -1e308, None),  # not aligned
    Hypothesis([], 5e-324, -0.0, []),  # an empty hypothesis, aligned
]
HYPOTHESES = (REPLY, 11, True, [[N_BEST, [], N_BEST[:1], []], []], (["m1", "m2"], 64))


def round_trip(messages: list[Any]) -> list[Any]:
    data = frames.encode(messages)
    (size,) = HEADER.unpack_from(data)
    assert size == len(data) - HEADER.size
    return frames.decode(data[HEADER.size :])


def sections(messages: list[Any]) -> tuple[int, int, int]:
    return SECTIONS.unpack_from(frames.encode(messages), HEADER.size)  # type: ignore[return-value]


def test_submits_and_outputs_round_trip_through_the_compact_sections() -> None:
    unwatched = (CALL, 8, "submit", ("sentiment", [], 1.5, "text"), {}, None, False)
    assert round_trip([SUBMIT, unwatched, OUTPUT]) == [SUBMIT, unwatched, OUTPUT]
    submits, outputs, pickled = sections([SUBMIT, unwatched, OUTPUT])
    assert submits
    assert outputs
    assert not pickled  # nothing of them pickled
    assert pickle.dumps(SUBMIT[3][1][0][2][1][0]) not in frames.encode([SUBMIT])


def test_floats_come_back_bit_for_bit() -> None:
    values = [0.1 + 0.2, 5e-324, -0.0, 1.0 - 2**-53]
    reply = (REPLY, 1, True, [[values]], ([], 0))
    (back,) = round_trip([reply])
    assert [struct.pack("!d", x) for x in back[3][0][0]] == [struct.pack("!d", x) for x in values]


def test_everything_else_goes_pickled_in_order_after_the_compact_ones() -> None:
    other = [("m", ("a", "key"), [{"item": 1}], [1])]  # another task's items and key: no kind holds them
    translate = (CALL, 3, "submit", ("toy", other, 9.0, "text"), {}, None, False)
    error = (REPLY, 3, False, portable(QueueFull("full", 2)), (["m"], 0))
    ragged = (REPLY, 4, True, [[[0.5], [0.5, 0.5]]], ([], 0))
    ints = (REPLY, 5, True, [[[1, 2]]], ([], 0))  # not floats: pickled, so they stay ints
    flat = (REPLY, 6, True, [[0.5, 0.25], []], ([], 0))  # floats, not rows of them
    control = [(NOTE, -1, "state", ("ready",), {}, None, False), (LEFT, 2), (CANCEL, 1)]
    rest = [translate, error, ragged, ints, flat, *control]
    assert round_trip([rest[0], SUBMIT, *rest[1:], OUTPUT]) == [SUBMIT, OUTPUT, *rest]
    back = round_trip([error])[0]
    assert back[3][0] is QueueFull
    assert type(round_trip([ints])[0][3][0][0][0]) is int


def test_any_string_fits_the_compact_sections() -> None:
    odd = "a\x00b \ud800 é \U0001f600"  # a NUL, a lone surrogate (JSON's "\ud800"), non-ASCII
    nul = (
        CALL,
        6,
        "submit",
        ("sentiment", [("m", None, [([1], NgramText([1], odd))], [1])], 1.0, "text"),
        {},
        (odd, odd),
        False,
    )
    assert round_trip([SUBMIT, nul]) == [SUBMIT, nul]
    assert sections([SUBMIT, nul])[0]
    assert not sections([SUBMIT, nul])[2]


def test_a_value_no_column_holds_sends_its_messages_pickled() -> None:
    big = (
        CALL,
        9,
        "submit",
        ("sentiment", [("m", None, [([2**31], NO_NGRAM)], [1])], 1.0, "text"),
        {},
        None,
        False,
    )
    assert round_trip([big]) == [big]
    assert sections([big])[:2] == (0, 0)


def test_an_empty_frame_and_empty_strings() -> None:
    assert round_trip([]) == []
    empty = (CALL, 0, "submit", ("", [("", None, [([], NO_NGRAM)], [0])], 0.0, ""), {}, ("", ""), False)
    assert round_trip([empty]) == [empty]


@pytest.mark.parametrize(
    "body",
    [
        b"",  # no section lengths
        SECTIONS.pack(5, 0, 0) + b"abc",  # lengths that do not add up
        SECTIONS.pack(0, 0, 3) + b"xyz",  # not a pickle
        SECTIONS.pack(0, 0, 4) + pickle.dumps(3)[:4],  # a truncated pickle
    ],
)
def test_bytes_that_are_not_a_frame_are_refused(body: bytes) -> None:
    with pytest.raises(BadFrame):
        frames.decode(body)


def test_a_compact_section_cut_short_or_with_false_counts_is_refused() -> None:
    data = frames.encode([SUBMIT])[HEADER.size :]
    a, _, _ = SECTIONS.unpack_from(data)
    compact = data[SECTIONS.size :]
    for cut in (compact[:10], compact[:-3]):
        with pytest.raises(BadFrame):
            frames.decode(SECTIONS.pack(len(cut), 0, 0) + cut)
    kind, count = COLUMN.unpack_from(compact)
    lying = COLUMN.pack(kind, count + 99) + compact[COLUMN.size :]  # 99 more calls claimed than sent
    with pytest.raises(BadFrame):
        frames.decode(SECTIONS.pack(len(lying), 0, 0) + lying)
    assert a == len(compact)
    for message in (TRANSLATE, HYPOTHESES):  # a column's bytes cut short, or one byte too many
        data = frames.encode([message])[HEADER.size :]
        la, lb, _ = SECTIONS.unpack_from(data)
        section = data[SECTIONS.size :]
        for cut in (section[:-1], section + b"\x00"):
            with pytest.raises(BadFrame):
                frames.decode((SECTIONS.pack(len(cut), 0, 0) if la else SECTIONS.pack(0, len(cut), 0)) + cut)


def test_a_pickled_section_that_is_not_a_list_is_refused() -> None:
    data = pickle.dumps({"a": 1})
    with pytest.raises(BadFrame, match="not a list"):
        frames.decode(SECTIONS.pack(0, 0, len(data)) + data)


def test_translation_items_cross_without_their_text_side() -> None:
    (back,) = round_trip([TRANSLATE])
    sent = [replace(s, source=None) for s in SENTENCES]
    assert back == (*TRANSLATE[:3], ("translation", [("m1", DecodeKey("fr", 16), sent, [3, 1, 3, 0]), *TRANSLATE[3][1][1:]],
                    1e9, "q"), *TRANSLATE[4:])  # fmt: skip
    assert [type(x) for x in (back[3][1][0][2][2].max_length, back[3][1][0][2][0].passes)] == [int, bool]
    data = frames.encode([TRANSLATE])
    assert sections([TRANSLATE])[1:] == (0, 0)  # compact, nothing pickled
    assert "€".encode() not in data  # no text: the surfaces, items taken out and verbatim text stay
    assert pickle.loads(pickle.dumps(SENTENCES[0])) == sent[0]  # nor pickled (a fallback): the same form


def test_n_best_hypotheses_come_back_bit_for_bit() -> None:
    (back,) = round_trip([HYPOTHESES])
    assert back == HYPOTHESES
    assert sections([HYPOTHESES])[::2] == (0, 0)
    got = [h for job in back[3] for hyps in job for h in hyps]
    sent = [h for job in HYPOTHESES[3] for hyps in job for h in hyps]
    assert [struct.pack("!dd", h.score, h.log_prob) for h in got] == [
        struct.pack("!dd", h.score, h.log_prob) for h in sent
    ]  # -0.0, the smallest subnormal and -inf as they were
    assert [h.alignment for h in got] == [[0, 0, 1], None, [], [0, 0, 1]]


def test_empty_batches_and_mixed_kinds_in_one_frame() -> None:
    empty_call = (CALL, 1, "submit", ("translation", [], 0.0, "text"), {}, None, False)
    no_items = (
        CALL,
        2,
        "submit",
        ("translation", [("m", DecodeKey("de", 4), [], [])], 0.0, "text"),
        {},
        None,
        False,
    )
    empty_reply = (REPLY, 1, True, [], ([], 0))
    passed_only = (REPLY, 2, True, [[[], []]], (["m"], 1))  # every sentence passed: no hypotheses
    mixed = (CALL, 3, "submit", ("x", [*SUBMIT[3][1], *TRANSLATE[3][1]], 2.0, "text"), {}, None, False)
    messages = [empty_call, no_items, TRANSLATE, SUBMIT, mixed, empty_reply, passed_only, HYPOTHESES, OUTPUT]
    back = round_trip(messages)
    assert sections(messages)[2] == 0
    assert [m[1] for m in back] == [1, 2, 11, 7, 3, 1, 2, 11, 7]
    assert back[4][3][1][0] == SUBMIT[3][1][0]
    assert back[4][3][1][1][2] == [replace(s, source=None) for s in SENTENCES]
    assert back[5:] == [empty_reply, passed_only, HYPOTHESES, OUTPUT]
    assert back[:2] == [empty_call, no_items]


def test_a_lying_hypotheses_section_is_refused() -> None:
    w = (
        HYPOTHESES[:3] + ([[[Hypothesis([1], -1.0, -1.0, [0, 0])]]],) + HYPOTHESES[4:]
    )  # 2 alignments, 1 token
    assert round_trip([w]) == [w]  # an alignment's length is its own: carried as it is
    data = bytearray(frames.encode([HYPOTHESES])[HEADER.size :])
    at = bytes(data).index(COLUMN.pack(1, 4))  # the first int32 column of 4: each item's hypothesis count
    assert struct.unpack_from("<4i", data, at + COLUMN.size) == (3, 0, 1, 0)
    data[at + COLUMN.size : at + COLUMN.size + 4] = struct.pack("<i", 99)  # 99 hypotheses claimed
    with pytest.raises(BadFrame):
        frames.decode(bytes(data))


def _maps(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


ATTEND = (
    CALL, 12, "submit",
    ("attention", [("m", None, [
        AttentionItem([5, 6, 2], [1, 9, 9], LayerSelection([0, 2], [1], [3, 0])),
        AttentionItem([5, 2], None, LayerSelection([1], [], [0])),
    ], [6, 2])], 4.5, "text"),
    {}, None, False,
)  # fmt: skip
EXTREMES = np.array([np.inf, -np.inf, np.nan, -0.0, np.finfo(np.float32).tiny, 1.0], np.float32)
TRANSLATOR_MAPS = TextMaps(_maps(2, 2, 3, 3), EXTREMES.reshape(1, 2, 3, 1), _maps(1, 2, 3, 3, seed=1))
CLASSIFIER_MAPS = TextMaps(_maps(1, 1, 2, 2, seed=2))
NO_LAYERS = TextMaps(
    np.empty((0, 1, 0, 0), np.float32), np.empty((0, 1, 0, 0), np.float32), _maps(0, 1, 3, 3)
)


def test_attention_items_and_their_maps_cross_as_columns() -> None:
    reply = (REPLY, 12, True, [[TRANSLATOR_MAPS, CLASSIFIER_MAPS, NO_LAYERS]], (["m"], 1))
    assert round_trip([ATTEND]) == [ATTEND]
    assert sections([ATTEND, reply])[2] == 0  # nothing pickled
    ((*head, [[a, b, c]], ran),) = round_trip([reply])
    assert (head, ran) == (list(reply[:3]), reply[4])
    for got, sent in zip((a, b, c), reply[3][0], strict=True):
        for x, y in zip(astuple_maps(got), astuple_maps(sent), strict=True):
            assert (x is None) == (y is None)
            if x is not None:
                assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes())  # NaN, -0.0: bits


def test_attention_maps_of_another_dtype_go_pickled() -> None:
    doubles = (REPLY, 13, True, [[TextMaps(np.zeros((1, 1, 2, 2)))]], ([], 0))  # float64: not as computed
    assert sections([doubles])[:2] == (0, 0)
    assert round_trip([doubles])[0][3][0][0].encoder.dtype == np.float64


def astuple_maps(maps: TextMaps) -> tuple[np.ndarray | None, ...]:
    return maps.encoder, maps.decoder, maps.cross


def test_a_job_takes_the_kind_whose_items_and_key_fit() -> None:
    """A job whose items fit one task's kind but whose key is another task's fits none, and goes pickled,
    whole and unchanged; a job without items takes the first kind its key fits."""
    odd = (
        CALL,
        5,
        "submit",
        ("x", [("m", DecodeKey("en", 2), [([5, 2], NO_NGRAM)], [2])], 1.0, "text"),
        {},
        None,
        False,
    )
    sentiment, translation = (SERVED.index(t) for t in (SentimentTask, TranslationTask))
    assert items.item_kind([([5, 2], NO_NGRAM)], None) == sentiment
    assert items.item_kind([([5, 2], NO_NGRAM)], DecodeKey("en", 2)) is None
    assert items.item_kind([], DecodeKey("en", 2)) == translation  # e.g. every sentence passed through
    assert sections([odd])[:2] == (0, 0)
    assert round_trip([odd]) == [odd]

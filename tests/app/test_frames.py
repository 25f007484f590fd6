"""The frames between the server's processes (app/parallel/frames.py): what goes in comes out, the compact
sections hold what they claim to, and bytes that are not a frame are refused."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pytest

from app.core.errors import QueueFull
from app.parallel import frames
from app.parallel.channel import CALL, CANCEL, LEFT, NOTE, REPLY, portable
from app.parallel.frames import HEADER, SECTIONS, BadFrame
from app.tasks.handlers import DecodeKey, Sentence

SUBMIT = (
    CALL, 7, "submit",
    ("sentiment", [("sentiment-en", None, [([5, 9, 2], ""), ([2**31 - 1, 0], "a text é")], [3, 2**40])], 123.25, "texts"),
    {}, ("rid-1", "10.0.0.7"), True,
)  # fmt: skip
OUTPUT = (REPLY, 7, True, [[[0.1, 0.9], [1 / 3, 2 / 3]], [[0.25, 0.5, 0.25]]], (["sentiment-en", "m2"], 17))


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
    key = DecodeKey("en", 4)
    sentences = [("m", key, [Sentence([4, 2], num_hypotheses=2)], [7])]
    translate = (CALL, 3, "submit", ("translation", sentences, 9.0, "text"), {}, None, False)
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


def test_a_nul_in_a_string_sends_the_submits_pickled() -> None:
    nul = (
        CALL,
        6,
        "submit",
        ("sentiment", [("m", None, [([1], "a\x00b")], [1])], 1.0, "text"),
        {},
        None,
        False,
    )
    assert round_trip([SUBMIT, nul]) == [SUBMIT, nul]
    assert sections([SUBMIT, nul])[0] == 0


def test_an_empty_frame_and_empty_strings() -> None:
    assert round_trip([]) == []
    empty = (CALL, 0, "submit", ("", [("", None, [([], "")], [0])], 0.0, ""), {}, ("", ""), False)
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
    lying = struct.pack("!IIII", 1, 1, 2, 99) + compact[16:]  # 99 token ids claimed
    with pytest.raises(BadFrame):
        frames.decode(SECTIONS.pack(len(lying), 0, 0) + lying)
    assert a == len(compact)


def test_a_pickled_section_that_is_not_a_list_is_refused() -> None:
    data = pickle.dumps({"a": 1})
    with pytest.raises(BadFrame, match="not a list"):
        frames.decode(SECTIONS.pack(0, 0, len(data)) + data)

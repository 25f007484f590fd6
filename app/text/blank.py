"""Blank text: what has no character a model reads (refused by the request schemas, skipped by the splitter)."""

from __future__ import annotations

import re

# What a model cannot read: whitespace, controls (Cc), format characters (Cf: zero-width spaces and joiners,
# the BOM, bidi marks, ...) and the rest of Unicode's Default_Ignorable_Code_Point (combining grapheme joiner,
# Hangul fillers, variation selectors, tags): sentencepiece's NFKC drops some of them, the rest become <unk>.
# Plus the two that sentencepiece drops itself: U+2581 (its space mark) and U+FFFD (a decoding error's mark).
# Written as regular-expression escapes, which Python's re and ECMA-262 (JSON Schema patterns) read alike.
_BMP = (
    r"\s\u2581\ufffd\x00-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    r"\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff"
    r"\uffa0\ufff0-\ufffb"
)
_ASTRAL = (
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    r"\U000e0000-\U000e0fff"
)
BLANK = re.compile(f"[{_BMP}{_ASTRAL}]*")  # fullmatch: nothing a model reads
# a character a model reads, as a JSON Schema pattern; without the astral ones, which ECMA-262 cannot name in
# a class without its "u" flag (a text of those only passes the pattern, and is refused by the server)
READ_PATTERN = f"[^{_BMP}]"


def is_blank(text: str) -> bool:
    """Whether `text` has nothing a model reads (stops at the first character that counts)."""
    return BLANK.fullmatch(text) is not None

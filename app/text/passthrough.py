"""Which texts of a translation request come back unchanged, without a model call.

Two kinds, as LibreTranslate answers them: a text with nothing to translate (no letter at all: numbers, emoji,
punctuation, symbols), and a text already in the target language (the source language given equal to the
target, or detected as it with source "auto"). A passed-through text is answered by the model name
PASSTHROUGH (the `model` of a native result, so a client sees which happened).
"""

from __future__ import annotations

from collections.abc import Sequence

PASSTHROUGH = "passthrough"  # the "model" that answered a text returned as it came


def has_letters(text: str) -> bool:
    """Whether any character is a letter (Unicode category L*): a text without one has nothing to translate."""
    return any(c.isalpha() for c in text)


def passes_through(text: str, source: str | None, target: str) -> bool:
    """Whether `text` (in language `source`, None when undetected) comes back unchanged into `target`."""
    return not has_letters(text) or source == target


def passed(texts: Sequence[str], sources: Sequence[str | None], target: str) -> list[int]:
    """The indices of the texts that come back unchanged (sources[i]: text i's language, given or detected)."""
    return [i for i, (t, s) in enumerate(zip(texts, sources, strict=True)) if passes_through(t, s, target)]

"""Sentence splitting for /translate: sentencex (Wikimedia's rule-based segmenter: its languages'
abbreviation lists and fallbacks compiled in, and fast), plus two fixes for what its rules miss.

Chosen by measurement on tests/app/data/sentence_splits.json (bench/sentences.py, BENCHMARKS.md): sentencex
alone passes more of the cases than the regex before it, and pysbd or blingfire pass barely more at a far
higher cost (time, wheel size). What it misses, and the fixes here (each has its cases in the corpus):
- a break after "?!", "!?" or "…" before a capital ("Quoi ?! Tu plaisantes !"), or after any sentence end
  before a list marker or a dialogue dash ("… porte. a) Fermez", "… porte. • Fermez", "Oui. - Non."): split
  there too;
- a letterless tail after a sentence end ("Ça va ? 7", "Merci. 15 €."): a sentence of its own, which passes
  through untranslated like any letterless sentence;
- a break inside a sentence: a piece that ends with a German ordinal ("im 19. Jahrhundert"), the French "M."
  (Monsieur) or "c.-à-d.", or whose next piece starts with "-", "º" or "ª" ("1.º de enero"), joins the next
  piece. A piece starting in lower case is not joined: informal text ("le chat. le chien !") stays split.
  Known limit: a German sentence ending in a bare number ("Sie war 19. Danach ...") stays joined.
"""

from __future__ import annotations

import re
import unicodedata

from sentencex import segment

from app.text.blank import is_blank
from app.text.passthrough import has_letters

_ALSO_ENDS = re.compile(r"(?<=[?!…])\s+(?=[\"'«„“‘¿¡(\[]?[A-ZÀ-ÖØ-ÞĀ-ſ])")  # ?! or … + capital
# a list marker after a sentence's end ("… porte. a) Fermez", "… porte. • Fermez"): a sentence of its own
_MARKER_NEXT = re.compile(r"(?<=[.?!…])\s+(?=(?:\(?\d{1,3}[.)]|\(?[a-z]\)|[•·▪◦‣●○■□►▶➢✓✔*+\-–—])\s)")
_END = re.compile(r"(?<=[.?!…»\"”)])\s+")  # where a letterless tail ("… universelle ? 10:15.") may start
_JOINS_NEXT = {  # language -> a piece ending like this does not end a sentence
    "de": re.compile(r"(?:^|\s)\d{1,3}\.$"),  # ordinal: "am 3.", "im 19.", "die 2."
    "fr": re.compile(r"(?:^|\s)(?:M|c\.-à-d)\.$"),  # Monsieur, c'est-à-dire
}
# a piece starting like this continues the one before ("c.-à-d.", "1.º"); "- " is a dialogue dash
_CONTINUES = re.compile(r"-(?!\s)|[ºª]")


def _chunks(lang: str, line: str) -> list[str]:
    """sentencex's pieces, cut again after ?!/… + capital; each keeps its trailing whitespace (they concatenate
    back to the line)."""
    out = []
    for piece in segment(lang, line):
        start = 0
        for m in sorted([*_ALSO_ENDS.finditer(piece), *_MARKER_NEXT.finditer(piece)], key=lambda m: m.end()):
            out.append(piece[start : m.end()])
            start = m.end()
        out.append(piece[start:])
    return [t for piece in out for t in _letterless_tail(piece)]


def _copied(char: str) -> bool:
    """A digit or a symbol (currency, emoji, ...): a tail of punctuation only ("»") stays its sentence's."""
    return char.isdigit() or unicodedata.category(char).startswith("S")


def _letterless_tail(piece: str) -> list[str]:
    """`piece`, its letterless tail after a sentence end ("Ça va ? 7", "Merci. 15 €.") cut off: it passes
    through untranslated (app.text.passthrough)."""
    for m in _END.finditer(piece):
        head, tail = piece[: m.end()], piece[m.end() :]
        if has_letters(head) and not has_letters(tail) and any(map(_copied, tail)):
            return [head, tail]
    return [piece]


def split_line(lang: str, line: str) -> list[str]:
    """One line's sentences, stripped; none blank (whitespace or characters the models ignore only, see
    app.text.blank.is_blank); a joined sentence keeps the line's own spacing."""
    joins = _JOINS_NEXT.get(lang)
    sentences: list[str] = []  # unstripped
    for chunk in _chunks(lang, line):
        if is_blank(chunk):
            if sentences:
                sentences[-1] += chunk
            continue
        prev = sentences[-1].rstrip() if sentences else ""
        if prev and (_CONTINUES.match(chunk.lstrip()) or (joins is not None and joins.search(prev))):
            sentences[-1] += chunk
        else:
            sentences.append(chunk)
    return [s.strip() for s in sentences]


def split_sentences(text: str, lang: str) -> list[list[str]]:
    """Lines, each a list of sentences: split on newlines (the layout /translate keeps), then into sentences."""
    return [split_line(lang, line) for line in text.split("\n")]

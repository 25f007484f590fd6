"""Items a translator should not translate, found in a sentence and taken out of what the model reads.

An item is copied verbatim into the translation (model/unknowns.py puts it back where the output aligns to
its place in the source), so the model translates the sentence as it reads without it. The classes, as
production MT protects them (DeepL's and Google's "do not translate" tags, LibreTranslate's fallback):

- links: URLs (`https://…`, `www.…`), e-mail addresses, @mentions and #hashtags;
- codes: a word that mixes letters and digits ("v2.3", "COVID-19", "A4", "MP3", "19h30"), ordinals ("1er",
  "2nd", "3º") excepted: they are words of the language; a camel-case or all-capitals name and its number
  ("iOS 17", "GPT 4");
- numbers, prices, dates, times, percentages and phone numbers: a run of non-letters, spaces inside ("15 €",
  "06 12 34 56 78", "12/03/2024", "14 h 30"), each space-separated group holding a digit or a symbol (a
  lone "?" or "-" between two numbers is the sentence's);
- emoji and symbol runs ("😀😀", "&", "→");
- a list marker opening the sentence ("1.", "2)", "a)", "•", "-");
- invisible format characters (bidi embeddings, overrides, isolates and marks, zero-width characters, the
  BOM, the soft hyphen: model/format_chars.py), taken out first; the ones glued to an item and balanced there
  travel inside it, the others are kept aside (`Protected.controls`): bidi pairs and marks go back balanced.

Sentence punctuation stays the model's: a run is cut back to its digits and symbols ("7." -> "7"), or grown to
the brackets it fills ("(2019)", "(TVA 20 %)"). A run glued to a letter on one side ("Tom&Jerry", "l'€") is left to the
model: taking it out would join or split words. Neighbouring items with only spaces between them make one.
Pure text work: no tokenizer here.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from model.format_chars import absorb, strip_format

_SPACE = " \u00a0\u202f"  # the spaces allowed inside an item ("15 €", "1 000")
_LINK = re.compile(
    r"(?:https?://|www\.)\S+"  # URL
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # e-mail
    r"|(?<![\w@#])[@#]\w+"  # @mention, #hashtag
)
_TIME = re.compile(r"(?<!\w)\d{1,2} ?[hH] ?\d{2}(?!\w)")  # "14 h 30", "8h30" (French times)
_WORD = re.compile(r"(?<!\w)\w+(?:[.\-/+]\w+)*")  # a word, inner . - / + kept ("v2.3", "COVID-19")
_ORDINAL = re.compile(r"\d+(?:er|re|ère|ème|eme|e|es|nd|st|rd|th|º|ª|°|o|a|os|as)", re.IGNORECASE)
_GROUP = re.compile(r"\S+")
_NUMBER = re.compile(r"\d+(?:[.,\u00a0\u202f ]\d{3})*(?:[.,]\d+)?")  # 7, 300.000, 1 000, 3,5
_NUMERIC = re.compile(
    r"[$€£]?\d[\d.,:/\u00a0\u202f ]*(?:[ \u00a0\u202f]?[%€$£]|[ \u00a0\u202f]?[hH][ \u00a0\u202f]?\d*)?"
)
_WORD_BEFORE = re.compile(r"(?<![\w'’])(\w+)[ \u00a0\u202f]$")  # the word just before, one space between
_END = re.compile(r"[ \u00a0\u202f]?[.!?…]*[\"»”)]*")  # the sentence's end after the item
_FUNCTION = {  # prepositions and articles before a time, date or amount (fr, es, en)
    *[
        "a",
        "à",
        "au",
        "aux",
        "de",
        "del",
        "des",
        "du",
        "el",
        "en",
        "la",
        "las",
        "le",
        "les",
        "los",
        "l'",
        "vers",
        "avant",
        "après",
        "dès",
        "depuis",
        "jusqu'à",
        "hasta",
        "desde",
    ],
    *[
        "hacia",
        "para",
        "por",
        "sobre",
        "sur",
        "dans",
        "par",
        "pour",
        "con",
        "sin",
        "at",
        "in",
        "on",
        "by",
        "for",
        "from",
        "to",
        "until",
        "since",
        "the",
        "of",
        "about",
    ],
}
_WORD_AFTER = re.compile(r"[ \u00a0\u202f][^\W\d_]{2,}(?![\w.-]*\d)")  # a space, then a word of letters
_NAMED = re.compile(r"(?<!\w)(?:[a-z]+[A-Z]\w*|[A-Z]{2,}) \d+(?:\.\d+)*(?!\w)")  # "iOS 17", "GPT 4"
_RUN = re.compile(rf"(?:[^\w\s]|[\d_])+(?:[{_SPACE}]+(?:[^\w\s]|[\d_])+)*")  # non-letters, spaces inside
_MARKER = re.compile(r"(?:\(?\d{1,3}[.)]|\(?[a-z]\)|[•·▪◦‣●○■□►▶➢✓✔*+\-–—])(?=\s)")
_SIGNS = "%&@#*/\\§‰†‡"  # punctuation by Unicode category (Po), copied as symbols
_BRACKETS = {"(": ")", "[": "]"}


@dataclass(frozen=True)
class Protected:
    """A sentence without its items: `text` is what the model reads; `items` are (position in `text` where the
    item stood, the item's text), in source order. `text` == the sentence when it has no item and no format
    character (`controls`, the ones no item holds). A quantity stays in `text` (its span in `quantities`): the
    caller masks it as a placeholder the model copies."""

    text: str
    items: tuple[tuple[int, str], ...] = ()
    quantities: tuple[tuple[int, int], ...] = ()  # spans of `text`: numbers left in (`is_quantity`)
    controls: tuple[tuple[int, str], ...] = ()  # format characters: (position in `text`, character)


def has_letters(text: str) -> bool:
    """Whether any character is a letter (Unicode category L*)."""
    return any(c.isalpha() for c in text)


def is_symbol(char: str) -> bool:
    """A character copied as it is: digit, symbol (S*: currency, math, emoji) or a sign like % & @ #."""
    return char.isdigit() or char in _SIGNS or unicodedata.category(char).startswith("S")


def is_code(word: str) -> bool:
    """A word mixing letters and digits that is not an ordinal."""
    return any(c.isdigit() for c in word) and has_letters(word) and not _ORDINAL.fullmatch(word)


def find_items(text: str) -> list[tuple[int, int]]:
    """Character spans of the items of `text` (see the module docstring), sorted, disjoint; neighbours
    with only spaces between them merged."""
    taken = [False] * len(text)
    spans: list[tuple[int, int]] = []

    def add(a: int, b: int) -> None:
        if a < b and not any(taken[a:b]):
            spans.append((a, b))
            taken[a:b] = [True] * (b - a)

    if m := _MARKER.match(text):
        add(*m.span())
    for m in _LINK.finditer(text):
        a, b = m.span()
        while b > a and unicodedata.category(text[b - 1]).startswith("P") and text[b - 1] not in "/#":
            b -= 1  # a URL's trailing "." or ")" is the sentence's
        add(a, b)
    for m in _TIME.finditer(text):
        add(*m.span())
    for m in _NAMED.finditer(text):
        add(*m.span())
    for m in _WORD.finditer(text):
        if is_code(m.group()):
            add(*m.span())
    for a, b in _runs(text, taken):
        while a < b and _trim(text[a]):
            a += 1
        while b > a and _trim(text[b - 1]):
            b -= 1
        glued = (a > 0 and text[a - 1].isalpha()) or (b < len(text) and text[b].isalpha())
        if a < b and not glued and any(map(is_symbol, text[a:b])):
            add(a, b)
    return _merged(text, _bracketed(text, _merged(text, sorted(spans))))


def _bracketed(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each span grown to the brackets it fills ("(2019)", "(TVA 20 %)", "[v2.3]"): the brackets are the
    item's, not left empty in what the model reads."""
    out = []
    for a, b in spans:
        while a > 0 and b < len(text) and _BRACKETS.get(text[a - 1]) == text[b]:
            a, b = a - 1, b + 1
        out.append((a, b))
    return out


def _runs(text: str, taken: list[bool]) -> list[tuple[int, int]]:
    """Runs of non-letters, spaces inside, cut where a space-separated group has no digit or symbol ("92 % ?
    15:30" is "92 %" and "15:30", the "?" the sentence's; a dash between two is kept: "15 € - 20 €") and
    around what is `taken` already."""
    out: list[tuple[int, int]] = []
    for m in _RUN.finditer(text):
        start, bridge = None, False  # where the current run starts; a dash group since its last group
        for g in _GROUP.finditer(text, m.start(), m.end()):
            if any(taken[g.start() : g.end()]):
                start = None
            elif any(map(is_symbol, g.group())):
                if start is None:
                    start = g.start()
                if out and out[-1][0] == start:
                    out.pop()  # the run so far grows
                out.append((start, g.end()))
                bridge = False
            elif start is not None and not bridge and all(c in "-–—" for c in g.group()):
                bridge = True
            else:
                start = None
    return out


def _trim(char: str) -> bool:
    """Cut from an item's ends: spaces and sentence punctuation (not % & @ # ...)."""
    return char.isspace() or (unicodedata.category(char).startswith("P") and char not in _SIGNS)


def _merged(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and all(c in _SPACE for c in text[out[-1][1] : a]) and a - out[-1][1] <= 1:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def is_quantity(text: str, a: int, b: int) -> bool:
    """Whether item text[a:b] is a number the sentence's grammar hangs on: a bare number counting the word
    after it ("70 años", "200 asientos", "20 jours"), or a number, time, price or percentage ending the
    sentence after a preposition or article ("a las 11.", "en 2013.", "del 6%."). The shipped models, trained
    with numbers as <unk>s, translate those in place better than without them (BENCHMARKS.md, test-split
    BLEU); a number anywhere else is taken out."""
    if _NUMBER.fullmatch(text, a, b) and _WORD_AFTER.match(text, b):
        return True
    before = _WORD_BEFORE.search(text, 0, a)
    ends = _END.fullmatch(text, b) is not None
    return (
        ends
        and before is not None
        and before.group(1).lower() in _FUNCTION
        and bool(_NUMERIC.fullmatch(text, a, b))
    )


def protect(text: str, quantities: bool = True) -> Protected:
    """`text` without its format characters (model/format_chars.py) and its items (each taken out with one
    space beside it, quantities aside unless `quantities` is False: a tokenizer with byte fallback has no
    placeholder for them), and where each stood."""
    stripped = strip_format(text)
    text = stripped.text
    spans = find_items(text)
    if not spans:
        return Protected(text, controls=stripped.chars)
    out: list[str] = []
    items: list[tuple[int, str]] = []
    kept: list[tuple[int, int]] = []
    taken: set[int] = set()  # format characters inside an item
    moved = list(range(len(text) + 1))  # per position of `text`, where it lands in the result
    pos = length = 0  # next character of `text` to copy, characters of the result so far
    for a, b in spans:
        if quantities and is_quantity(text, a, b):
            continue  # copied with the text around it
        keep, item, after = text[pos:a], absorb(stripped, a, b, taken), text[b : b + 1]
        if keep[-1:].isspace() and (not after or after.isspace() or not after.isalnum()):
            keep = keep[:-1]  # "a 3 b" -> "a b", "beau 7." -> "beau."
        elif not (length or keep) and after.isspace():
            b += 1  # "7 jours" -> "jours"
        kept += _shifted(spans, pos, pos + len(keep), length, text) if quantities else []
        moved[pos:b] = [length + min(p - pos, len(keep)) for p in range(pos, b)]  # an item's: its place
        out.append(keep)
        length += len(keep)
        items.append((length, item))
        pos = b
    kept += _shifted(spans, pos, len(text), length, text) if quantities else []
    moved[pos:] = [length + p - pos for p in range(pos, len(text) + 1)]
    out.append(text[pos:])
    controls = tuple((moved[p], c) for k, (p, c) in enumerate(stripped.chars) if k not in taken)
    return Protected("".join(out), tuple(items), tuple(kept), controls)


def _shifted(spans: list[tuple[int, int]], start: int, end: int, at: int, text: str) -> list[tuple[int, int]]:
    """The quantities among `spans` inside text[start:end], moved to where that piece lands (`at`)."""
    return [
        (a - start + at, b - start + at)
        for a, b in spans
        if start <= a and b <= end and is_quantity(text, a, b)
    ]

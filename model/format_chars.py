"""Invisible format characters (Unicode Cf) kept out of what a translator reads and put back balanced.

Taken out of a sentence before its items are found (model/protect.py) and put back in the output
(model/unknowns.py `restore`), by class:

- bidi embeddings and overrides LRE RLE LRO RLO (U+202A U+202B U+202D U+202E), closed by PDF (U+202C);
- bidi isolates LRI RLI FSI (U+2066-U+2068), closed by PDI (U+2069), which also closes the embeddings
  opened inside;
- direction marks LRM RLM ALM (U+200E U+200F U+061C);
- other invisibles: zero-width space (U+200B), word joiner (U+2060), invisible operators (U+2061-U+2064),
  deprecated format characters (U+206A-U+206F), BOM / zero-width no-break space (U+FEFF), soft hyphen
  (U+00AD), and ZWNJ / ZWJ (U+200C U+200D) except between two visible characters, one of them neither ASCII
  nor Latin (an emoji sequence; a Persian, Arabic or Indic word): there they shape what is written and stay.

Put back: an opener and its closer (paired as the Unicode bidi algorithm pairs them; an opener left open is
closed at the sentence's end, a closer without an opener dropped) wrap the output tokens aligned to the
source they wrapped; a pair around the whole sentence wraps the whole output (its final punctuation inside
or outside, as in the source). A pair that wraps nothing aligned, or would cross one already placed, is
dropped whole: the output never holds an opener left open or a stray closer. A mark at the sentence's start,
end or before its final punctuation goes to the same place of the output; inside, before the output token
aligned to the word it stood before. Other invisibles are not put back: they mark the source's own words
(a hyphenation point, a line-break opportunity, a join) or its encoding (a BOM), not the translation's.
Characters glued to an item (a number, a code) travel inside it when they are balanced there
("\u2066COVID-19\u2069"). Other Cf characters (Arabic number signs, emoji tag sequences) are left to the items
and the model.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

EMBEDDINGS, PDF = "\u202a\u202b\u202d\u202e", "\u202c"  # LRE RLE LRO RLO, closed by PDF
ISOLATES, PDI = "\u2066\u2067\u2068", "\u2069"  # LRI RLI FSI, closed by PDI
OPENERS, CLOSERS = EMBEDDINGS + ISOLATES, PDF + PDI
MARKS = "\u200e\u200f\u061c"  # LRM RLM ALM
JOINERS = "\u200c\u200d"  # ZWNJ ZWJ
OTHERS = "\u200b\u2060\u2061\u2062\u2063\u2064\u206a\u206b\u206c\u206d\u206e\u206f\ufeff\u00ad"
FORMAT = OPENERS + CLOSERS + MARKS + JOINERS + OTHERS


@dataclass(frozen=True)
class Stripped:
    """A sentence without its format characters: `text`, and each character taken out as (the position in
    `text` it stood before, the character), in source order."""

    text: str
    chars: tuple[tuple[int, str], ...] = ()


def _shapes(text: str, i: int) -> bool:
    """Whether the joiner text[i] sits between two visible characters, one of them not ASCII or Latin."""
    if i == 0 or i + 1 == len(text):
        return False
    near = (text[i - 1], text[i + 1])
    if any(c.isspace() or c in FORMAT for c in near):
        return False
    return not all(c.isascii() or unicodedata.name(c, "").startswith("LATIN") for c in near)


def strip_format(text: str) -> Stripped:
    """`text` without its format characters (the module docstring's classes)."""
    out: list[str] = []
    chars: list[tuple[int, str]] = []
    for i, c in enumerate(text):
        if c in FORMAT and not (c in JOINERS and _shapes(text, i)):
            chars.append((len(out), c))
        else:
            out.append(c)
    return Stripped("".join(out), tuple(chars)) if chars else Stripped(text)


def match(chars: Sequence[str]) -> list[tuple[int, int | None]]:
    """(opener, closer) indices into `chars`, as the bidi algorithm pairs them: a PDF closes the last opener
    if it is an embedding, a PDI the last isolate and the embeddings opened inside it; None: left open.
    Closers matched to nothing are in no pair."""
    stack: list[int] = []
    pairs: dict[int, int | None] = {}
    for k, c in enumerate(chars):
        if c in OPENERS:
            stack.append(k)
        elif c == PDF and stack and chars[stack[-1]] in EMBEDDINGS:
            pairs[stack.pop()] = k
        elif c == PDI and any(chars[s] in ISOLATES for s in stack):
            while chars[s := stack.pop()] not in ISOLATES:
                pairs[s] = k  # an embedding left open inside the isolate ends with it
            pairs[s] = k
    pairs.update((s, None) for s in stack)
    return sorted(pairs.items())


def closer(opener: str) -> str:
    return PDI if opener in ISOLATES else PDF


def absorb(stripped: Stripped, a: int, b: int, taken: set[int]) -> str:
    """Item stripped.text[a:b] with the format characters glued to it or inside it that are balanced there (a
    mark, a closed pair); adds their indices in stripped.chars to `taken`."""
    near = [k for k, (p, _) in enumerate(stripped.chars) if a <= p <= b and k not in taken]
    chars = [stripped.chars[k][1] for k in near]
    kept = {n for n, c in enumerate(chars) if c not in OPENERS + CLOSERS}
    kept |= {n for o, cl in match(chars) if cl is not None for n in (o, cl)}
    out, pos = [], a
    for n in sorted(kept):
        p, c = stripped.chars[near[n]]
        out += [stripped.text[pos:p], c]
        pos = p
        taken.add(near[n])
    out.append(stripped.text[pos:b])
    return "".join(out)


def place(
    chars: Sequence[tuple[int, str]], aligned: Sequence[int | None], last: int, punct: tuple[int, int]
) -> list[tuple[int, str]]:
    """Where each format character of a source goes in its output: (output token it goes before, character),
    in the order to insert them.

    Args:
        chars: (source position it stood before, character), in source order.
        aligned: (T,) per output token the source position it aligns to (None: none).
        last: the source's EOS position (a character standing there ends the sentence).
        punct: where the final punctuation starts, in the source and in the output.
    """
    t = len(aligned)

    def edge(p: int) -> int | None:
        return 0 if p == 0 else t if p >= last else punct[1] if p == punct[0] else None

    out: list[tuple[tuple[int, ...], str]] = []  # (sort key, character)
    spans: list[tuple[int, int]] = []  # the output spans wrapped so far
    found = [c for _, c in chars]
    for o, cl in match(found):
        pa, pb = chars[o][0], last if cl is None else chars[cl][0]
        inside = [k for k, s in enumerate(aligned) if s is not None and pa <= s < pb]
        if pa == 0 and pb in (last, punct[0]):  # the whole sentence (its final punctuation in or out)
            i, j = 0, edge(pb)
        else:
            i, j = (inside[0], inside[-1] + 1) if inside else (None, None)
        if pa >= pb or i is None or j is None or i >= j:
            continue  # wraps nothing the model read, or nothing of the output
        if any(i0 < i < j0 < j or i < i0 < j < j0 for i0, j0 in spans):
            continue  # would cross a pair placed already
        spans.append((i, j))
        out += [
            ((i, 1, -j, o), found[o]),
            ((j, 0, -i, -o), closer(found[o])),
        ]  # outer opens first, closes last
    for k, (p, c) in enumerate(chars):
        if c not in MARKS:
            continue  # pairs placed above; other invisibles dropped
        at = edge(p)
        if at is None:
            at = next((x for x, s in enumerate(aligned) if s == p), None)
        if at is not None:
            out.append(((at, 1, -at, k), c))
    return [(key[0], c) for key, c in sorted(out, key=lambda kc: kc[0])]

"""Glossaries: source terms a translation renders exactly as given ({"source term": "target term"}).

A term matches:
- at word boundaries: no letter, digit, underscore or hyphen glued to either end ("chat" is not in "chateau"
  nor in "chat-bot"; an elided article is no part of the word: "l'ordinateur" holds "ordinateur"); a term's
  end that is punctuation, or a letter of a script written without spaces (Han, kana, Thai, Lao, Khmer,
  Myanmar), needs no boundary;
- case-insensitively (Python's Unicode case folding, one character for one: "Chat" is "chat"; a script
  without case matches as written), a run of spaces inside a term matching any run of spaces;
- longest match first: of overlapping matches the longest wins, then the earliest.

Matching runs on what the model would read of the sentence (model/protect.py's text, without format
characters and items): a match overlapping a protected item is none, as items come back verbatim anyway.

How model/unknowns.py carries a term through the model (`encode_source`'s `terms`):
- TERMS_KEPT (the server's): the model reads the term as written; the output words aligned to it (`replaced`)
  become the target term, and a term no word aligns to is put back where the output aligns its place, as an
  item is. Nothing of the sentence is hidden from the model, so the words around the term stay its own;
- TERMS_UNK, measured and not kept: one <unk> placeholder per term, like a quantity, its target written
  where the output's <unk> aligns (`written_once`); the shipped models learned <unk> as numbers only;
- TERMS_OUT, measured and not kept: taken out and put back as an item (`take_out`).
bench/glossary.py measures the three (docs/real-text.md). Pure text work: no tokenizer here.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

TERMS_KEPT, TERMS_UNK, TERMS_OUT = "kept", "unk", "out"  # encode_source's `terms` (module docstring)
Span = tuple[int, int]  # a term's source positions [start, end): its surface at start is the target term
_UNSPACED = ("CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR")  # Unicode name prefixes
_GLUED = r"[\w\-\u2010\u2011]"  # a word character, or a hyphen joining a compound


def normal(term: str) -> str:
    """A source term as it is matched: spaces collapsed, case folded (duplicates are equal here)."""
    return " ".join(term.split()).casefold()


def _bounded(char: str) -> bool:
    """Whether a term ending in `char` must end at a word boundary."""
    if not (char.isalnum() or char == "_"):
        return False
    return not unicodedata.name(char, "").startswith(_UNSPACED)


def _pattern(term: str) -> re.Pattern[str]:
    words = term.split()
    body = r"\s+".join(re.escape(w) for w in words)
    left = f"(?<!{_GLUED})" if _bounded(words[0][0]) else ""
    right = f"(?!{_GLUED})" if _bounded(words[-1][-1]) else ""
    return re.compile(left + body + right, re.IGNORECASE)


@dataclass(frozen=True)
class Glossary:
    """Source terms, each with its target term and the pattern that finds it."""

    terms: tuple[tuple[str, str], ...]  # (source term, target term), as given
    patterns: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, terms: Mapping[str, str]) -> Glossary:
        """A glossary of `terms`, those with a character other than a space on both sides (the caller refuses
        the others, and duplicates by `normal`)."""
        kept = tuple((s, t) for s, t in terms.items() if s.split() and t.split())
        return cls(kept, tuple(_pattern(s) for s, _ in kept))

    def find(self, text: str, taken: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int, str]]:
        """(start, end, target term) of each match in `text`, sorted and disjoint, longest first (see the
        module docstring); none overlaps a span of `taken` (an empty span (p, p) blocks matches across p)."""
        found = [
            (m.start(), m.end(), target)
            for pattern, (_, target) in zip(self.patterns, self.terms, strict=True)
            for m in pattern.finditer(text)
        ]
        chosen: list[tuple[int, int, str]] = []
        blocked = list(taken)
        for a, b, target in sorted(found, key=lambda m: (m[0] - m[1], m[0])):  # longest, then earliest
            if not any(a < y and x < b for x, y in blocked):
                chosen.append((a, b, target))
                blocked.append((a, b))
        return sorted(chosen)


def take_out(text: str, spans: Sequence[tuple[int, int]]) -> tuple[str, list[int]]:
    """`text` without `spans` (sorted, disjoint; each with one space beside it, as model.protect takes
    items out), and per position of `text` (its end included) where it lands: a span's own positions at the
    place it stood."""
    out: list[str] = []
    moved = list(range(len(text) + 1))
    pos = length = 0
    for a, b in spans:
        keep, after = text[pos:a], text[b : b + 1]
        if keep[-1:].isspace() and (not after or after.isspace() or not after.isalnum()):
            keep = keep[:-1]  # "le chat noir" -> "le noir"
        elif not (length or keep) and after.isspace():
            b += 1  # "Chat noir" -> "noir"
        moved[pos:b] = [length + min(p - pos, len(keep)) for p in range(pos, b)]
        out.append(keep)
        length += len(keep)
        pos = b
    moved[pos:] = [length + p - pos for p in range(pos, len(text) + 1)]
    out.append(text[pos:])
    return "".join(out), moved


def as_items(
    text: str,
    found: Sequence[tuple[int, int, str]],
    items: Sequence[tuple[int, str]],
    controls: Sequence[tuple[int, str]],
    quantities: Sequence[Span],
) -> tuple[str, list[tuple[int, str]], list[tuple[int, str]], list[Span]]:
    """TERMS_OUT: `text` without the terms `found` (`find`'s), each term's target an item where it stood,
    in source order with the other `items`; those, the format `controls` and the `quantities` moved along
    (model.protect.Protected's fields, positions in `text`)."""
    text, moved = take_out(text, [(a, b) for a, b, _ in found])
    stood = sorted([*((at, 0, item) for at, item in items), *((a, 1, t) for a, _, t in found)])
    return (
        text,
        [(moved[at], item) for at, _, item in stood],
        [(moved[at], c) for at, c in controls],
        [(moved[a], moved[b]) for a, b in quantities],
    )


def written_once(
    tokens: Sequence[int], alignment: Sequence[int], held: Sequence[int], unk: int
) -> tuple[list[int], list[int]]:
    """TERMS_UNK: each placeholder (`held`: their source positions) written once: an output <unk> run that
    picks one an earlier run picked takes the next one no run picked (source order), or goes if none is left."""
    picked = {a for t, a in zip(tokens, alignment, strict=True) if t == unk}
    free = [u for u in held if u not in picked]
    out_tokens, out_alignment, seen = [], [], set()
    last: tuple[int, int | None] | None = None  # the previous placeholder <unk>: (its pick, where it went)
    for t, a in zip(tokens, alignment, strict=True):
        if t != unk or a not in held:
            last = None
        else:
            to = last[1] if last and last[0] == a else a if a not in seen else free.pop(0) if free else None
            last = (a, to)
            if to is None:
                continue
            seen.add(a := to)
        out_tokens.append(t)
        out_alignment.append(a)
    return out_tokens, out_alignment


def replaced(
    pieces: Sequence[str],
    tokens: Sequence[int],
    alignment: Sequence[int],
    terms: Sequence[tuple[int, int, str]],
    unk: int,
    space: int | None,
) -> tuple[list[int], list[int]]:
    """TERMS_KEPT: per term ((start, end) source positions, target term), the output words the model wrote
    for it as one <unk> aligned to its start (whose surface is the target term), after a `space` piece when
    they started with one. Its words: those with at least half their tokens aligned into it, from the first
    to the last (none of another term's between), cut to the run of as many words as the target term has
    that reads most like it, else the latest ("the candles" -> "candles"), grown over a neighbour that
    repeats the target's edge word. A term no output word aligns to is left to the caller (no <unk>)."""
    words = _words(pieces)
    text = [_text(pieces[a:b]) for a, b in words]
    owner: list[int | None] = []  # per word, the start of the term it renders
    for a, b in words:
        voters = [j for j in range(a, b) if _alnum(pieces[j])]  # (not the "'" of "Tom's")
        votes = Counter(next((t[0] for t in terms if t[0] <= alignment[j] < t[1]), None) for j in voters)
        best, count = votes.most_common(1)[0]
        owner.append(best if 2 * count >= len(voters) else None)
    cuts = []  # (first token, end token, term start)
    for start, _, target in terms:
        mine = [w for w, o in enumerate(owner) if o == start]
        if not mine or any(owner[w] not in (None, start) for w in range(mine[0], mine[-1] + 1)):
            continue
        want = target.casefold().split()
        n = min(len(want), mine[-1] + 1 - mine[0])
        first = max(range(mine[0], mine[-1] + 2 - n), key=lambda w: (_alike(text[w : w + n], want), w))
        last = first + n - 1
        if first > 0 and owner[first - 1] is None and text[first - 1] == want[0]:
            first -= 1  # "no [no place]": the model wrote the target's word from another source word
        if last + 1 < len(words) and owner[last + 1] is None and text[last + 1] == want[-1]:
            last += 1
        cuts.append((words[first][0], words[last][1], start))
    out_tokens, out_alignment = list(tokens), list(alignment)
    for a, b, start in sorted(cuts, reverse=True):  # from the back: earlier cuts keep their places
        lead = [space] if space is not None and pieces[a].startswith("\u2581") else []
        out_tokens[a:b] = [*lead, unk]
        out_alignment[a:b] = [start] * (len(lead) + 1)
    return out_tokens, out_alignment


def _words(pieces: Sequence[str]) -> list[Span]:
    """Token spans of the output's words: from a "\u2581" piece to the next ("I'm" is one), without the
    punctuation pieces at either end."""
    starts = [k for k, p in enumerate(pieces) if k == 0 or p.startswith("\u2581")]
    out = []
    for a, b in zip(starts, [*starts[1:], len(pieces)], strict=True):
        while a < b and not _alnum(pieces[a]):
            a += 1
        while b > a and not _alnum(pieces[b - 1]):
            b -= 1
        if a < b:
            out.append((a, b))
    return out


def _alike(words: Sequence[str], want: Sequence[str]) -> float:
    """How much `words` read like `want` (casefolded), 0 below half alike: a target that reads like no word
    written is the latest run's ("a new apartment" -> "a new [flat]")."""
    ratio = SequenceMatcher(None, " ".join(words), " ".join(want)).ratio()
    return ratio if ratio >= 0.5 else 0.0


def _text(pieces: Sequence[str]) -> str:
    return "".join(pieces).replace("\u2581", " ").strip().casefold()


def _alnum(piece: str) -> bool:
    return any(c.isalnum() for c in piece)

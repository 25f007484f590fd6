"""HTML for translation: the text of each block to translate, and the document rebuilt around its translations.

A block is a run of text and inline elements (b, i, a, span, em, strong, ...: INLINE) between other markup
(a <p>, a <br>, a <div>, a comment): "Bonjour <b>le</b> monde" is one text, translated as sentences, not three
fragments. The inline tags are not sent to the model: the shipped models (small vocabularies, no byte
fallback) turn any marker into <unk> and garble the sentence around it, so the translation carries none.
They are put back by alignment (place_tags): an element whose text comes back verbatim (a number, a name)
around it, else at the word boundary nearest its relative position. The tags keep their source order, so
their balance is the source's, and none is ever lost.

The parser is the standard library's `html.parser` (maintained with CPython, HTML5 tokenizing rules for tags,
comments and character references, no dependency, no tree: nothing is re-serialized). Every parser event's
raw source span is kept, so all that is not translated text comes back byte for byte: tags with their
attributes, quoting and case, comments, doctype, character references in attributes, `<script>`/`<style>`
contents and the whitespace around text. lxml, selectolax and bs4 build a tree and serialize it again, which
normalizes quoting, case, entities and broken markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape, unescape
from html.parser import HTMLParser

from app.text.passthrough import has_letters
from app.text.sentences import split_sentences

RAW_TEXT = frozenset({"script", "style"})  # contents are code, not text
# elements inside a sentence: part of a block (void ones, img and wbr, too); every other tag ends a block
INLINE = frozenset({
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "font", "i", "img", "ins", "kbd",
    "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u", "var", "wbr",
})  # fmt: skip
PREFORMATTED = frozenset({"pre", "textarea"})  # whitespace inside is content: kept as it is
_SPACE = " \t\n\r\f"  # HTML's ASCII whitespace (a no-break space is content)
_TRAILING = ".,;:!?…)]}»\"'"  # punctuation a closing tag goes before when it ends a word


@dataclass(frozen=True)
class _Event:
    start: int  # offset into the source
    text: str | None  # a text event's decoded text (None: markup, or text inside script/style)
    pre: bool  # inside <pre>/<textarea>
    inline: str | None  # "+b" / "-b": an inline tag opening / closing b


@dataclass
class _Block:
    """source[start:end], rebuilt as lead + the translation with `tags` put back + trail."""

    start: int
    end: int
    lead: str
    trail: str
    text: str  # what is translated: the block's text, whitespace runs as one space outside <pre>
    tags: list[tuple[int, str, str]]  # (offset into text, raw tag, "+b"/"-b") in source order


class _Events(HTMLParser):
    """Records every event: where it starts (offset into the source), the decoded text of a text event, whether
    it is inside <pre>/<textarea>, and the tag that an inline tag event opens (+) or closes (-)."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.events: list[_Event] = []
        self.raw_depth = self.pre_depth = 0

    def _mark(self, text: str | None = None, inline: str | None = None) -> None:
        line, col = self.getpos()
        raw, pre = self.raw_depth > 0, self.pre_depth > 0
        inline = None if raw or pre else inline  # inside <pre>, every tag ends a block
        self.events.append(_Event(self.line_starts[line - 1] + col, None if raw else text, pre, inline))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(inline=f"+{tag}" if tag in INLINE else None)
        self.raw_depth += tag in RAW_TEXT
        self.pre_depth += tag in PREFORMATTED

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(inline=f"+{tag}" if tag in INLINE else None)  # <img/>: opens nothing

    def handle_endtag(self, tag: str) -> None:
        self.raw_depth = max(0, self.raw_depth - (tag in RAW_TEXT))
        self.pre_depth = max(0, self.pre_depth - (tag in PREFORMATTED))
        self._mark(inline=f"-{tag}" if tag in INLINE else None)

    def handle_data(self, data: str) -> None:
        self._mark(data)

    def handle_comment(self, data: str) -> None:
        self._mark()

    def handle_decl(self, decl: str) -> None:
        self._mark()

    def handle_pi(self, data: str) -> None:
        self._mark()

    def unknown_decl(self, data: str) -> None:
        self._mark()


class HtmlDocument:
    """`texts`: the text of each block to translate, in order; `render(translations)`: the document with each
    block's text replaced by its translation (escaped) and its inline tags put back, all else as it was."""

    def __init__(self, source: str) -> None:
        self.source = source
        parser = _Events(source)
        parser.feed(source)
        parser.close()
        events = _merged([*parser.events, _Event(len(source), None, False, None)])
        self.blocks: list[_Block] = []
        run: list[tuple[int, int, _Event]] = []  # the current block's (start, end, event)
        for event, after in zip(events, events[1:], strict=False):
            # a text whose span is not exactly it holds markup the parser dropped ("</>"): kept as it is
            exact = event.text is not None and unescape(source[event.start : after.start]) == event.text
            if exact or event.inline is not None:
                if run and (event.pre or run[-1][2].pre):  # in <pre>: each text its own block
                    self._add(run)
                    run = []
                run.append((event.start, after.start, event))
            else:
                self._add(run)
                run = []
        self._add(run)
        self.texts = [b.text for b in self.blocks]

    def _add(self, run: list[tuple[int, int, _Event]]) -> None:
        """The block of `run`, unless it has nothing to translate (no letters: kept as it is)."""
        while run and run[0][2].inline is not None:  # leading and trailing tags stay outside the block
            run = run[1:]
        while run and run[-1][2].inline is not None:
            run = run[:-1]
        plain = "".join(e.text or "" for _, _, e in run)
        if not has_letters(plain):
            return
        pre = run[0][2].pre
        lead_n = len(plain) - len(plain.lstrip(_SPACE))
        trail_n = len(plain) - len(plain.rstrip(_SPACE))
        at, text, tags, offset = 0, [], [], 0  # offset: into plain
        for start, end, e in run:
            if e.inline is not None:
                tags.append((at, self.source[start:end], e.inline))
                continue
            for c in e.text or "":
                inside = lead_n <= offset < len(plain) - trail_n
                if inside and (pre or c not in _SPACE):
                    text.append(c)
                elif inside and text and text[-1] != " ":
                    text.append(" ")  # a whitespace run is one space
                offset += 1
                at = len(text)
        self.blocks.append(
            _Block(run[0][0], run[-1][1], plain[:lead_n], plain[len(plain) - trail_n :], "".join(text), tags)
        )

    def render(self, translations: Sequence[str], langs: tuple[str, str] = ("en", "en")) -> str:
        """The document with each block's translation; langs: (source, target) languages, for sentences."""
        if len(translations) != len(self.blocks):
            raise ValueError(f"{len(self.blocks)} text blocks, {len(translations)} translations")
        out, at = [], 0
        for block, text in zip(self.blocks, translations, strict=True):
            out += [self.source[at : block.start], block.lead, _with_tags(block, text, langs), block.trail]
            at = block.end
        out.append(self.source[at:])
        return "".join(out)


def _merged(events: list[_Event]) -> list[_Event]:
    """Consecutive text events as one ("a < b" arrives as three data events: one text)."""
    out: list[_Event] = []
    for e in events:
        if out and e.text is not None and out[-1].text is not None and e is not events[-1]:
            out[-1] = _Event(out[-1].start, (out[-1].text or "") + e.text, out[-1].pre, None)
        else:
            out.append(e)
    return out


def _with_tags(block: _Block, translation: str, langs: tuple[str, str]) -> str:
    """The translation, escaped, with the block's tags at their places (place_tags)."""
    places = place_tags(block.text, translation, block.tags, langs)
    out, at = [], 0
    for (_, raw, _), q in zip(block.tags, places, strict=True):
        out += [_escape(translation[at:q]), raw]
        at = q
    out.append(_escape(translation[at:]))
    return "".join(out)


def _escape(text: str) -> str:
    return escape(text, quote=False).replace("\xa0", "&nbsp;")  # visible in the markup, as usual


def place_tags(
    source: str, translation: str, tags: Sequence[tuple[int, str, str]], langs: tuple[str, str] = ("en", "en")
) -> list[int]:
    """Where each tag goes in `translation` (offsets, non-decreasing: the tags keep their source order, so
    their balance). An element whose source text is found once, verbatim, in the translation wraps it;
    every other tag goes to the word boundary nearest its relative position (an opening tag to a word's
    start, a closing one to a word's end, before its punctuation): within its sentence when source and
    translation have as many sentences (`langs`: theirs, for the splitter), else within the block."""
    m = len(translation)
    starts = [0] + [i for i in range(1, m) if translation[i - 1] == " " and translation[i] != " "]
    ends = sorted(
        {_word_end(translation, i) for i in range(1, m + 1) if i == m or translation[i] == " "} | {m}
    )
    places: list[int | None] = [None] * len(tags)
    for i, j in _elements(tags):  # verbatim anchors first
        inner = source[tags[i][0] : tags[j][0]].strip()
        if inner and translation.count(inner) == 1:
            k = translation.index(inner)
            places[i], places[j] = k, k + len(inner)
    src, tgt = _sentences(source, langs[0]), _sentences(translation, langs[1])
    if len(src) != len(tgt) or not src:  # no sentence pairs to go by: the block is one
        src, tgt = [(0, len(source))], [(0, m)]
    out, last = [], 0
    for k, (offset, _, kind) in enumerate(tags):
        q = places[k]
        if q is None:
            opening = kind[0] == "+"
            # its sentence: an opening tag's is the one it starts or precedes, a closing tag's the one it ends
            if opening:
                s = next((i for i, (_, e) in enumerate(src) if e > offset), len(src) - 1)
            else:
                s = max([i for i, (b, _) in enumerate(src) if b < offset] or [0])
            (a, b), (c, d) = src[s], tgt[s]
            frac = min(1.0, max(0.0, (offset - a) / max(1, b - a)))
            inside = [x for x in (starts if opening else ends) if c <= x <= d] or [c if opening else d]
            q = _nearest(inside, c + frac * (d - c), later=not opening)
        last = max(last, q)
        out.append(last)
    return out


def _sentences(text: str, lang: str) -> list[tuple[int, int]]:
    """The (start, end) of each sentence of `text` (app/text/sentences.py, as the service splits)."""
    spans, at = [], 0
    for line in split_sentences(text, lang):
        for sentence in line:
            start = text.find(sentence, at)
            if start < 0:  # not found as it is: no spans to trust
                return []
            spans.append((start, start + len(sentence)))
            at = start + len(sentence)
    return spans


def _word_end(text: str, i: int) -> int:
    """The end of the word ending at i, before its trailing punctuation (unless the word is all of it)."""
    j = i
    while j > 0 and text[j - 1] in _TRAILING:
        j -= 1
    return i if j == 0 or text[j - 1] == " " else j


def _nearest(candidates: list[int], target: float, later: bool = False) -> int:
    """The candidate nearest `target`; on a tie the earlier one, or the later (a closing tag: the element
    keeps the wider span)."""
    return min(candidates, key=lambda c: (abs(c - target), -c if later else c))


def _elements(tags: Sequence[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """(opening, closing) index pairs of the tags that match, as a stack matches them."""
    stack: list[int] = []
    pairs = []
    for k, (_, _, kind) in enumerate(tags):
        if kind[0] == "+":
            stack.append(k)
        elif stack and tags[stack[-1]][2][1:] == kind[1:]:
            pairs.append((stack.pop(), k))
    return pairs

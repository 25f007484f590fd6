"""HTML for translation: the text nodes to translate, and the document rebuilt around their translations.

The parser is the standard library's `html.parser` (maintained with CPython, HTML5 tokenizing rules for tags,
comments and character references, no dependency, no tree: nothing is re-serialized). Every parser event's
raw source span is kept, so all that is not a translated text node comes back byte for byte: tags with their
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

RAW_TEXT = frozenset({"script", "style"})  # contents are code, not text
PREFORMATTED = frozenset({"pre", "textarea"})  # whitespace inside is content: kept as it is
_SPACE = " \t\n\r\f"  # HTML's ASCII whitespace (a no-break space is content)
_SPACES = re.compile(f"[{_SPACE}]+")


@dataclass(frozen=True)
class _Node:
    """A text node to translate: `source[start:end]` is replaced by its translation."""

    start: int
    end: int
    lead: str  # whitespace kept around the translation
    trail: str


class _Events(HTMLParser):
    """Records where every event starts (offset into the source) and the decoded text of text events."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        # (start offset, the decoded text of a text event or None, inside <pre>/<textarea>)
        self.events: list[tuple[int, str | None, bool]] = []
        self.raw_depth = self.pre_depth = 0

    def _mark(self, text: str | None = None) -> None:
        line, col = self.getpos()
        raw = self.raw_depth > 0
        self.events.append((self.line_starts[line - 1] + col, None if raw else text, self.pre_depth > 0))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark()
        self.raw_depth += tag in RAW_TEXT
        self.pre_depth += tag in PREFORMATTED

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark()  # <br/>: opens nothing

    def handle_endtag(self, tag: str) -> None:
        self.raw_depth = max(0, self.raw_depth - (tag in RAW_TEXT))
        self.pre_depth = max(0, self.pre_depth - (tag in PREFORMATTED))
        self._mark()

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
    """`texts`: the document's text nodes to translate, in order; `render(translations)`: the document with
    each replaced by its translation (escaped), everything else as it was."""

    def __init__(self, source: str) -> None:
        self.source = source
        parser = _Events(source)
        parser.feed(source)
        parser.close()
        events = [*parser.events, (len(source), None, False)]
        self.nodes: list[_Node] = []
        self.texts: list[str] = []
        i = 0
        while i < len(events) - 1:
            start, text, pre = events[i]
            j = i + 1
            while text is not None and events[j][1] is not None and j < len(events) - 1:
                text += events[j][1]  # "a < b" arrives as three data events: one text node
                j += 1
            end = events[j][0]
            if text is not None:
                self._add(start, end, text, pre)
            i = j

    def _add(self, start: int, end: int, text: str, pre: bool) -> None:
        raw = self.source[start:end]
        # translated only when the span is exactly that text (the parser can drop bogus markup such as
        # "</>" without an event: then the span holds more than the text, and is kept as it is)
        if unescape(raw) != text or not any(c.isalpha() for c in text):
            return  # whitespace, numbers and punctuation stay as they are
        core = text.strip(_SPACE)
        if not pre:
            core = _SPACES.sub(" ", core)  # a line break inside a paragraph is a space
        lead = raw[: len(raw) - len(raw.lstrip(_SPACE))]
        trail = raw[len(raw.rstrip(_SPACE)) :]
        self.nodes.append(_Node(start, end, lead, trail))
        self.texts.append(core)

    def render(self, translations: Sequence[str]) -> str:
        if len(translations) != len(self.nodes):
            raise ValueError(f"{len(self.nodes)} text nodes, {len(translations)} translations")
        out, at = [], 0
        for node, text in zip(self.nodes, translations, strict=True):
            text = escape(text, quote=False).replace("\xa0", "&nbsp;")  # visible in the markup, as usual
            out += [self.source[at : node.start], node.lead, text, node.trail]
            at = node.end
        out.append(self.source[at:])
        return "".join(out)

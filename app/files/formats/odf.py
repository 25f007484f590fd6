"""OpenDocument text and presentations (.odt, .odp): the paragraphs (text:p, text:h) of content.xml, read and
written with lxml, every other part of the zip copied as it was (the mimetype first and stored, as ODF asks).

A paragraph's text is mixed content: its own text, its spans' and links' text and the tails after them.
It is translated as one text; the translation goes into the first of those slots and the others are
emptied, so spans (and their styles), spacing elements and the paragraph's structure stay (as runs.py does
for Office runs). A paragraph inside it (a note's body, a frame) is a paragraph of its own; a note's
citation (its number) is not text.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator, Sequence

from lxml import etree

from app.files.document import Format, UnreadableFile, stripped, unzipped
from app.text.passthrough import has_letters

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
PARAGRAPHS = (f"{{{TEXT}}}p", f"{{{TEXT}}}h")
SPACING = frozenset({f"{{{TEXT}}}s", f"{{{TEXT}}}tab", f"{{{TEXT}}}line-break"})  # a space in the text
CITATION = f"{{{TEXT}}}note-citation"
CONTENT = "content.xml"
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True)
Slot = tuple[etree._Element, str]  # (element, "text" | "tail")


def _slots(para: etree._Element) -> Iterator[Slot | None]:
    """The paragraph's text slots in reading order; None where a spacing element stands."""
    if para.text:
        yield para, "text"
    for child in para:
        if child.tag in SPACING:
            yield None
        elif child.tag not in PARAGRAPHS and child.tag != CITATION and isinstance(child.tag, str):
            yield from _slots(child)
        if child.tail:
            yield child, "tail"


class OpenDocument:
    def __init__(self, data: bytes, kind: str) -> None:
        self.entries = unzipped(data, kind)
        content = next((d for info, d in self.entries if info.filename == CONTENT), None)
        if content is None:
            raise UnreadableFile(f"not {kind} (no {CONTENT})")
        try:
            self.root = etree.fromstring(content, _PARSER)
        except etree.XMLSyntaxError as e:
            raise UnreadableFile(f"not {kind} ({e})") from None
        self.paragraphs: list[list[Slot]] = []
        self.texts: list[str] = []
        self.edges: list[tuple[str, str]] = []
        for para in self.root.iter(*PARAGRAPHS):
            found = list(_slots(para))
            slots = [s for s in found if s is not None]
            lead, core, trail = stripped("".join(" " if s is None else getattr(*s) for s in found))
            if has_letters(core):
                self.paragraphs.append(slots)
                self.texts.append(" ".join(core.split()))
                self.edges.append((lead, trail))

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        for slots, (lead, trail), translation in zip(self.paragraphs, self.edges, translations, strict=True):
            for i, (element, attr) in enumerate(slots):
                setattr(element, attr, lead + translation + trail if i == 0 else "")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for info, data in self.entries:
                if info.filename == CONTENT:
                    data = etree.tostring(self.root, xml_declaration=True, encoding="UTF-8")
                z.writestr(info, data)
        return out.getvalue()


ODT = Format(
    ".odt", "application/vnd.oasis.opendocument.text", lambda data: OpenDocument(data, "an OpenDocument text")
)
ODP = Format(
    ".odp",
    "application/vnd.oasis.opendocument.presentation",
    lambda data: OpenDocument(data, "an OpenDocument presentation"),
)

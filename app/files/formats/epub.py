"""EPUB books (.epub): every XHTML document of the zip (its content documents: chapters, navigation) through
app/text/html.py, as an .html file; every other part (styles, images, the package document) copied as it was,
the mimetype first and stored, as EPUB asks. The text blocks of all documents are one file's texts (one
translation call)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

from app.files.document import Format, UnreadableFile, decoded, unzipped
from app.text.html import HtmlDocument

KIND = "an EPUB book"
XHTML = (".xhtml", ".html", ".htm")


class Book:
    def __init__(self, data: bytes) -> None:
        self.entries = unzipped(data, KIND)
        if not any(info.filename == "META-INF/container.xml" for info, _ in self.entries):
            raise UnreadableFile(f"not {KIND} (no META-INF/container.xml)")
        self.documents: dict[int, tuple[HtmlDocument, bytes]] = {}  # entry index -> (document, BOM)
        for i, (info, body) in enumerate(self.entries):
            if info.filename.lower().endswith(XHTML):
                source, bom = decoded(body)
                self.documents[i] = (HtmlDocument(source), bom)
        self.texts = [t for doc, _ in self.documents.values() for t in doc.texts]

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(self.texts)} texts, {len(translations)} translations")
        out, at = io.BytesIO(), 0
        with zipfile.ZipFile(out, "w") as z:
            for i, (info, body) in enumerate(self.entries):
                if i in self.documents:
                    doc, bom = self.documents[i]
                    body = bom + doc.render(translations[at : at + len(doc.texts)], langs).encode("utf-8")
                    at += len(doc.texts)
                z.writestr(info, body)
        return out.getvalue()


FORMAT = Format(".epub", "application/epub+zip", Book)

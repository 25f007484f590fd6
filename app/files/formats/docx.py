"""Word documents (.docx) through python-docx: the paragraphs of the body (tables and text boxes included),
headers, footers and comments (runs.py); styles, runs, tables, images and every other part are saved as read."""

from __future__ import annotations

import io
from collections.abc import Sequence

import docx
from docx.exceptions import PythonDocxError
from docx.opc.exceptions import OpcError
from docx.oxml.ns import qn
from lxml import etree

from app.files.document import Format, UnreadableFile, unzipped
from app.files.formats.runs import Paragraphs

TEXT_PARTS = ("DocumentPart", "HeaderPart", "FooterPart", "CommentsPart")  # the parts that hold text


class WordDocument:
    def __init__(self, data: bytes) -> None:
        unzipped(data, "a Word document")  # every part read once to check it: python-docx reads it again
        try:
            self.doc = docx.Document(io.BytesIO(data))
        # no document in the zip, a part not as python-docx expects (AttributeError: its root element)
        except (OpcError, PythonDocxError, KeyError, ValueError, AttributeError, etree.LxmlError) as e:
            raise UnreadableFile(f"not a Word document ({e})") from None
        parts = [p for p in self.doc.part.package.iter_parts() if type(p).__name__ in TEXT_PARTS]
        self.paragraphs = Paragraphs((p.element for p in parts), qn("w:p"), qn("w:t"), preserve_space=True)
        self.texts = self.paragraphs.texts

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        self.paragraphs.write(translations)
        out = io.BytesIO()
        try:
            self.doc.save(out)
        # a part python-docx read but cannot write (a relationship without a Type)
        except (TypeError, ValueError) as e:
            raise UnreadableFile(f"not a Word document ({e})") from None
        return out.getvalue()


FORMAT = Format(
    ".docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", WordDocument
)

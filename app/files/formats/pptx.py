"""PowerPoint presentations (.pptx) through python-pptx: the paragraphs of every slide's shapes (text boxes,
placeholders, tables, groups) and of its notes (runs.py); layouts, masters, styles and media are saved as
read."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pptx
from lxml import etree
from pptx.exc import PythonPptxError
from pptx.oxml.ns import qn

from app.files.document import Format, UnreadableFile, unzipped
from app.files.formats.runs import Paragraphs


class Presentation:
    def __init__(self, data: bytes) -> None:
        unzipped(data, "a PowerPoint presentation")  # every part checked: python-pptx reads it again
        try:
            self.prs = pptx.Presentation(io.BytesIO(data))
        # no presentation in the zip, a part not as python-pptx expects (AttributeError: its root element)
        except (PythonPptxError, KeyError, ValueError, AttributeError, etree.LxmlError) as e:
            raise UnreadableFile(f"not a PowerPoint presentation ({e})") from None
        roots = [s.element for s in self.prs.slides]
        roots += [s.notes_slide.element for s in self.prs.slides if s.has_notes_slide]
        self.paragraphs = Paragraphs(roots, qn("a:p"), qn("a:t"), preserve_space=False)
        self.texts = self.paragraphs.texts

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        self.paragraphs.write(translations)
        out = io.BytesIO()
        self.prs.save(out)
        return out.getvalue()


FORMAT = Format(
    ".pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation", Presentation
)

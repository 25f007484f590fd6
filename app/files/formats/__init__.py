"""The supported file formats, by extension (what /frontend/settings lists as supportedFilesFormat, in
LibreTranslate's order)."""

from __future__ import annotations

from pathlib import PurePath

from app.files.document import Format
from app.files.formats import docx, epub, html, odf, pptx, srt, txt

FORMATS: dict[str, Format] = {
    f.extension: f
    for f in (txt.FORMAT, odf.ODT, odf.ODP, docx.FORMAT, pptx.FORMAT, epub.FORMAT, html.FORMAT, srt.FORMAT)
}


def format_of(filename: str) -> Format | None:
    """The format a file name's extension names (any case), if it is supported."""
    return FORMATS.get(PurePath(filename).suffix.lower())

"""HTML (.html, UTF-8): app/text/html.py, as the LibreTranslate API's format=html (text blocks with their
inline tags placed back; all markup, comments, scripts and styles byte for byte)."""

from __future__ import annotations

from collections.abc import Sequence

from app.files.document import Format, decoded
from app.text.html import HtmlDocument


class HtmlFile:
    def __init__(self, data: bytes) -> None:
        source, self.bom = decoded(data)
        self.html = HtmlDocument(source)
        self.texts = list(self.html.texts)

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        return self.bom + self.html.render(translations, langs).encode("utf-8")


FORMAT = Format(".html", "text/html; charset=utf-8", HtmlFile)

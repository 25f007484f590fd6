"""SubRip subtitles (.srt, UTF-8), read and written by the `srt` package: each subtitle's content is one text
(its lines joined by spaces: a sentence broken over two lines is translated whole, and comes back on one line);
indices, timings and what follows the timings (proprietary positions) are kept."""

from __future__ import annotations

from collections.abc import Sequence

import srt

from app.files.document import Format, UnreadableFile, decoded
from app.text.passthrough import has_letters


class SubtitleDocument:
    def __init__(self, data: bytes) -> None:
        text, self.bom = decoded(data)
        self.eol = "\r\n" if "\r\n" in text else "\n"
        try:
            self.subtitles = list(srt.parse(text))
        except srt.SRTParseError as e:
            raise UnreadableFile(f"not SubRip subtitles ({e})") from None
        self.translated = [i for i, s in enumerate(self.subtitles) if has_letters(s.content)]
        self.texts = [" ".join(self.subtitles[i].content.split()) for i in self.translated]

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        for i, translation in zip(self.translated, translations, strict=True):
            if translation.strip():  # a blank content would end the subtitle early: the source stays
                self.subtitles[i].content = translation
        composed = srt.compose(self.subtitles, reindex=False, eol=self.eol)
        return self.bom + composed.encode("utf-8")


FORMAT = Format(".srt", "application/x-subrip; charset=utf-8", SubtitleDocument)

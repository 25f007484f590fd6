"""Plain text (.txt, UTF-8): each line with a letter is one text; line ends, blank lines and the whitespace
around each line stay as they were (the service reads a text as lines anyway, so a paragraph sent whole would
be translated line by line all the same)."""

from __future__ import annotations

from collections.abc import Sequence

from app.files.document import Format, decoded, stripped
from app.text.passthrough import has_letters


class TextDocument:
    def __init__(self, data: bytes) -> None:
        text, self.bom = decoded(data)
        # per line: (lead, core, trail + line end); core "" for a line kept as it is
        self.lines = []
        for line in text.splitlines(keepends=True):
            body = line.rstrip("\r\n")
            lead, core, trail = stripped(body) if has_letters(body) else (body, "", "")
            self.lines.append((lead, core, trail + line[len(body) :]))
        self.texts = [core for _, core, _ in self.lines if core]

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        it = iter(translations)
        out = [lead + (next(it) if core else "") + trail for lead, core, trail in self.lines]
        return self.bom + "".join(out).encode("utf-8")


FORMAT = Format(".txt", "text/plain; charset=utf-8", TextDocument)

"""What every file format gives: a Document (its texts, and the file rebuilt around their translations), and
the Format record that opens one."""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

# what the parts of a zipped format (.docx, .pptx) may expand to: they are read whole into memory, and a
# few MB of zip can hold gigabytes of repeated XML
MAX_UNZIPPED_BYTES = 256 * 1024 * 1024


class UnreadableFile(ValueError):
    """The bytes are not a file of the format its name says (a 400 at the routes)."""


class Document(Protocol):
    texts: list[str]  # what is translated, in file order: every text with a letter, stripped

    def render(self, translations: Sequence[str], langs: tuple[str, str]) -> bytes:
        """The file with texts[i] replaced by translations[i]; everything that is not text as it was.
        langs: (source, target), for formats that place markup by sentence."""
        ...


@dataclass(frozen=True)
class Format:
    extension: str  # ".docx", as LibreTranslate's supportedFilesFormat lists it
    media_type: str  # the Content-Type of the translated file
    open: Callable[[bytes], Document]  # UnreadableFile when the bytes are not this format


def decoded(data: bytes) -> tuple[str, bytes]:
    """UTF-8 text (a BOM kept aside, to write back): (text, bom); UnreadableFile otherwise."""
    bom = b"\xef\xbb\xbf" if data.startswith(b"\xef\xbb\xbf") else b""
    try:
        return data[len(bom) :].decode("utf-8"), bom
    except UnicodeDecodeError as e:
        raise UnreadableFile(f"not UTF-8 text ({e.reason} at byte {e.start})") from None


def stripped(text: str) -> tuple[str, str, str]:
    """(leading whitespace, the text, trailing whitespace): the whitespace stays out of the translation."""
    core = text.strip()
    if not core:
        return text, "", ""
    lead = text[: len(text) - len(text.lstrip())]
    return lead, core, text[len(lead) + len(core) :]


def unzipped(data: bytes, kind: str) -> list[tuple[zipfile.ZipInfo, bytes]]:
    """The zip's parts, each read whole (its CRC checked). UnreadableFile unless `data` is a zip of stored or
    deflated parts (what Office, OpenDocument and EPUB write) that expand to at most MAX_UNZIPPED_BYTES and
    read back whole: a cut or damaged part, or a size or CRC that lies, is not the format (a part that hides
    its size is read only as far as its stated size)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            _check_parts(infos, kind)
            return [(info, z.read(info)) for info in infos]
    except UnreadableFile:
        raise
    # BadZipFile: no zip, a bad CRC; zlib.error, EOFError: a damaged or cut part; NotImplementedError: a zip
    # version zipfile does not read
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as e:
        raise UnreadableFile(f"not {kind} ({e})") from None


def _check_parts(infos: Sequence[zipfile.ZipInfo], kind: str) -> None:
    if (size := sum(info.file_size for info in infos)) > MAX_UNZIPPED_BYTES:
        raise UnreadableFile(
            f"not {kind}: its parts expand to {size:,} bytes, more than {MAX_UNZIPPED_BYTES:,}"
        )
    for info in infos:
        if info.flag_bits & 0x1:
            raise UnreadableFile(f"not {kind}: its part {info.filename!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise UnreadableFile(
                f"not {kind}: its part {info.filename!r} uses compression method {info.compress_type}, "
                "not deflate"
            )

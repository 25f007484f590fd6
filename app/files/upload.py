"""An uploaded file read within APP_MAX_FILE_BYTES, and the headers of a file answered for download."""

from __future__ import annotations

from urllib.parse import quote

from starlette.datastructures import UploadFile

CHUNK = 1 << 16


class FileTooLarge(Exception):
    """An upload over APP_MAX_FILE_BYTES (a 413 at the routes)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the file is larger than {limit} bytes (APP_MAX_FILE_BYTES)")


async def read_upload(file: UploadFile, limit: int) -> bytes:
    """The file's bytes; FileTooLarge once past `limit` (its declared size first, then what is read)."""
    if file.size is not None and file.size > limit:
        raise FileTooLarge(limit)
    chunks, seen = [], 0
    while chunk := await file.read(CHUNK):
        seen += len(chunk)
        if seen > limit:
            raise FileTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def attachment(name: str) -> dict[str, str]:
    """Content-Disposition naming the download (RFC 6266: an ASCII fallback and the UTF-8 name)."""
    ascii_name = name.encode("ascii", "replace").decode().replace("?", "_").replace('"', "_")
    return {"Content-Disposition": f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"}

"""File translation's limits and bad files through HTTP (tiny random checkpoints, in-process), on both
routes (POST /translate/file and LibreTranslate's translate_file): an upload past APP_MAX_FILE_BYTES is a 413,
a file whose texts pass a limit of one translation request a 422 at "file" naming the limit (LibreTranslate's
400), a bad file (a cut or damaged zip, a bomb, another format's bytes, an unknown extension) a 400 or 415;
nothing is stored and no spilled upload is left on disk."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from app.edge.body_limit import UPLOAD_SLACK
from app.files import document
from app.schemas import MAX_TEXTS
from tests.app.conftest import eager_settings, serve
from tests.app.sample_files import (
    bomb,
    cut,
    encrypted,
    flipped,
    lying,
    make_docx,
    make_epub,
    make_odt,
    make_pptx,
    make_txt,
)

pytestmark = pytest.mark.anyio

LT = "/libretranslate"


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings], tmp_path: Path) -> Callable[..., Settings]:
    return eager_settings(lambda **o: make_settings(**({"file_dir": tmp_path / "files"} | o)))


async def lt_upload(client: httpx.AsyncClient, name: str, data: bytes) -> httpx.Response:
    return await client.post(
        f"{LT}/translate_file", data={"source": "fr", "target": "en"}, files={"file": (name, data)}
    )


async def native_upload(client: httpx.AsyncClient, name: str, data: bytes) -> httpx.Response:
    files = {"file": (name, data)}
    return await client.post("/translate/file", data={"source_lang": "fr", "target_lang": "en"}, files=files)


async def test_file_size_limit_is_413(make_settings: Callable[..., Settings]) -> None:
    limit = 4096
    big = ("Le chat dort.\n" * (limit // 14 + 1)).encode()
    async with serve(make_settings(max_file_bytes=limit, max_body_bytes=1024)) as (_, client):
        r = await lt_upload(client, "a.txt", big)
        assert r.status_code == 413, r.text
        assert "4096 bytes (APP_MAX_FILE_BYTES)" in r.json()["error"]
        r = await native_upload(client, "a.txt", big)
        assert r.status_code == 413, r.text
        assert "APP_MAX_FILE_BYTES" in r.json()["detail"]
        # a body far past the file's limit is refused by its declared length, before it is read
        huge = b"x" * (limit + 70_000)
        r = await client.post(
            f"{LT}/translate_file", content=huge, headers={"content-type": "multipart/form-data"}
        )
        assert r.status_code == 413
        assert "APP_MAX_FILE_BYTES" in r.json()["error"]
        # within the file limit, an upload passes APP_MAX_BODY_BYTES (the other routes keep it)
        assert (await lt_upload(client, "a.txt", make_txt())).status_code == 200
        r = await client.post(
            "/translate", json={"text": "x" * 2000, "source_lang": "fr", "target_lang": "en"}
        )
        assert r.status_code == 413


def stored(settings: Settings) -> list[Path]:
    """What the file store holds on disk."""
    assert settings.file_dir is not None
    return list(settings.file_dir.iterdir()) if settings.file_dir.exists() else []


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory an upload over 1 MB spills into while its form is parsed (Starlette's
    SpooledTemporaryFile), made empty and this test's."""
    (path := tmp_path / "spool").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def spilled(spool: Path) -> list[Path]:
    """The files in the spool (torch keeps its compile caches in folders there)."""
    return [path for path in spool.iterdir() if path.is_file()]


@pytest.mark.parametrize(
    ("settings", "name", "data", "limit"),
    [
        ({"max_work": 200}, "a.docx", make_docx, "more than APP_MAX_WORK (200)"),
        ({"max_queue": 3}, "a.docx", make_docx, "more than its queue holds (3, APP_MAX_QUEUE)"),
        ({}, "a.txt", lambda: b"Le chat dort.\n" * (MAX_TEXTS + 1), f"at most {MAX_TEXTS} texts"),
        # one sentence of 2,400 characters: pieces of whole words within APP_MAX_CHARS, each over 512 tokens
        ({}, "a.txt", lambda: b"a b c " * 400, "exceeds the 512-token limit of translate-fr-en"),
    ],
)
async def test_a_file_past_a_request_limit_names_the_file_and_the_limit(
    make_settings: Callable[..., Settings],
    settings: dict[str, Any],
    name: str,
    data: Callable[[], bytes],
    limit: str,
) -> None:
    """A file's texts go in one translation request: past one of its limits, a 422 at "file" (not at
    /translate's texts, which the client never sent), naming the limit (LibreTranslate's 400, as its
    /translate's); nothing is stored."""
    async with serve(make_settings(**settings)) as (app, client):
        r = await native_upload(client, name, data())
        assert r.status_code == 422, r.text
        [err] = r.json()["detail"]
        assert err["loc"] == ["body", "file"]
        assert err["msg"].startswith("file: "), err
        assert limit in err["msg"], err
        r = await lt_upload(client, name, data())
        assert r.status_code == 400, r.text  # LibreTranslate's status for a limit, as its /translate
        assert r.json()["error"].startswith("Invalid request: file: ")
        assert limit in r.json()["error"]
        assert stored(app.state.service.settings) == []


@pytest.mark.parametrize(
    ("name", "data", "native", "error"),
    [
        ("a.docx", lambda: cut(make_docx()), 400, "the file is not a Word document (File is not a zip file)"),
        ("a.odt", lambda: flipped(make_odt()), 400, "the file is not an OpenDocument text (Error -3"),
        ("a.pptx", lambda: lying(make_pptx()), 400, "the file is not a PowerPoint presentation (Bad CRC-32"),
        ("a.epub", lambda: encrypted(make_epub()), 400, "the file is not an EPUB book: its part"),
        ("a.pptx", make_docx, 400, "the file is not a PowerPoint presentation"),  # a .docx named .pptx
        ("a.exe", lambda: b"MZ\x90\x00", 415, "file format"),  # an extension of no format
        ("a.docx", lambda: bomb(2_000_000), 400, "the file is not a Word document: its parts expand to"),
    ],
)
async def test_bad_files_are_4xx_and_leave_nothing_on_disk(
    make_settings: Callable[..., Settings],
    spool: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    data: Callable[[], bytes],
    native: int,
    error: str,
) -> None:
    monkeypatch.setattr(document, "MAX_UNZIPPED_BYTES", 1_000_000)  # the bomb: 2 MB of zeros in 2 kB
    async with serve(make_settings()) as (app, client):
        r = await native_upload(client, name, data())
        assert r.status_code == native, r.text
        assert error in r.json()["detail"]
        r = await lt_upload(client, name, data())
        assert r.status_code == 400, r.text
        assert r.json()["error"].startswith("Invalid request: ")
        assert error in r.json()["error"]
        assert stored(app.state.service.settings) == []
        assert spilled(spool) == []


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("route", [f"{LT}/translate_file", "/translate/file"])
async def test_a_200_mb_upload_is_413_and_read_no_further_than_the_limit(
    make_settings: Callable[..., Settings], spool: Path, route: str, declared: bool
) -> None:
    """Declared (Content-Length), it is refused before a byte is read; streamed (chunked), once the bytes
    pass the limit, the part read so far (over 1 MB: spilled to a temporary file) discarded."""
    size, limit, chunk = 200_000_000, 2_000_000, b"Le chat dort.\n" * 4096
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b"".join(  # the fields of both routes (each ignores the other's)
            b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % field
            for field in [
                (b"source", b"fr"),
                (b"target", b"en"),
                (b"source_lang", b"fr"),
                (b"target_lang", b"en"),
            ]
        )
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'
        while sent < size:
            sent += len(chunk)
            yield chunk
        yield b"\r\n--b--\r\n"

    headers = {"content-type": "multipart/form-data; boundary=b"}
    if declared:
        headers["content-length"] = str(size + 400)
    async with serve(make_settings(max_file_bytes=limit)) as (app, client):
        r = await client.post(route, content=body(), headers=headers)
        assert r.status_code == 413, r.text
        assert "APP_MAX_FILE_BYTES" in r.text
        assert sent <= (0 if declared else limit + UPLOAD_SLACK + len(chunk))
        assert stored(app.state.service.settings) == []
        assert spilled(spool) == []

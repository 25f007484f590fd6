"""File translation through HTTP (tiny random checkpoints, in-process): POST /translate/file and
LibreTranslate's translate_file + download_file. A file's texts are translated as POST /translate translates
them (one call, the same batch), everything else is kept; the stored files are private (unguessable names,
the asking key only, gone after APP_FILE_TTL_S). Limits and bad files: tests/app/test_file_limits.py."""

from __future__ import annotations

import asyncio
import io
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docx
import httpx
import pptx
import pytest
import srt
from fastapi import FastAPI

from app.core.settings import Settings
from app.files import storage
from app.files.formats import FORMATS
from tests.app.conftest import eager_settings, eventually, serve
from tests.app.sample_files import (
    make_docx,
    make_epub,
    make_html,
    make_odp,
    make_odt,
    make_pptx,
    make_srt,
    make_txt,
)

pytestmark = pytest.mark.anyio

LT = "/libretranslate"
KEY = "s3cret-key"
FR_EN = {"source": "fr", "target": "en"}
DOCX_TYPE = FORMATS[".docx"].media_type
SAMPLES: dict[str, Callable[[], bytes]] = {
    ".txt": make_txt, ".odt": make_odt, ".odp": make_odp, ".docx": make_docx, ".pptx": make_pptx,
    ".epub": make_epub, ".html": make_html, ".srt": make_srt,
}  # fmt: skip
URL = re.compile(r"http://test/libretranslate/download_file/([A-Za-z0-9_-]{43})\.(sample\.[a-z]+)")


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings], tmp_path: Path) -> Callable[..., Settings]:
    return eager_settings(lambda **o: make_settings(**({"file_dir": tmp_path / "files"} | o)))


@pytest.fixture(scope="module")
async def files_app(
    app_checkpoint_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = Settings(
        checkpoint_dir=app_checkpoint_dir, torchscript=False, file_dir=tmp_path_factory.mktemp("files")
    )
    async with serve(settings) as pair:
        yield pair


@pytest.fixture
def client(files_app: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return files_app[1]


def texts_of(ext: str, data: bytes) -> list[str]:
    return FORMATS[ext].open(data).texts


async def translated(client: httpx.AsyncClient, texts: list[str]) -> list[str]:
    """What POST /translate answers for `texts` (fr -> en), in one request."""
    r = await client.post("/translate", json={"texts": texts, "source_lang": "fr", "target_lang": "en"})
    assert r.status_code == 200, r.text
    return [res["translation"] for res in r.json()["results"]]


async def lt_upload(client: httpx.AsyncClient, name: str, data: bytes, **fields: Any) -> httpx.Response:
    return await client.post(f"{LT}/translate_file", data=FR_EN | fields, files={"file": (name, data)})


async def test_native_docx_is_translated_as_translate_translates_its_texts(client: httpx.AsyncClient) -> None:
    source = make_docx()
    files = {"file": ("Rapport final.docx", source)}
    r = await client.post("/translate/file", data={"source_lang": "fr", "target_lang": "en"}, files=files)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == DOCX_TYPE
    assert r.headers["content-disposition"] == (
        "attachment; filename=\"Rapport_final.docx\"; filename*=UTF-8''Rapport_final.docx"
    )
    texts = texts_of(".docx", source)
    expected = await translated(client, texts)
    before, after = docx.Document(io.BytesIO(source)), docx.Document(io.BytesIO(r.content))
    by_text = dict(zip(texts, expected, strict=True))
    for b, a in zip(before.paragraphs, after.paragraphs, strict=True):
        assert a.text == by_text.get(b.text, b.text)  # translated, or (no letters) as it was
        assert [(x.bold, x.italic, x.font.size) for x in a.runs] == [
            (x.bold, x.italic, x.font.size) for x in b.runs
        ]
    cells = [c.text for row in after.tables[0].rows for c in row.cells]
    assert cells == [by_text[t] for t in ["Nom", "Ville", "Marie", "Paris est belle."]]


@pytest.mark.parametrize("ext", list(SAMPLES))
async def test_libretranslate_translates_and_serves_every_format(client: httpx.AsyncClient, ext: str) -> None:
    source = SAMPLES[ext]()
    r = await lt_upload(client, f"sample{ext}", source)
    assert r.status_code == 200, r.text
    assert (m := URL.fullmatch(r.json()["translatedFileUrl"])) is not None, r.json()
    assert m.group(2) == f"sample{ext}"
    got = await client.get(r.json()["translatedFileUrl"])
    assert got.status_code == 200, got.text
    assert got.headers["content-type"] == FORMATS[ext].media_type
    assert f'filename="sample{ext}"' in got.headers["content-disposition"]
    texts = texts_of(ext, source)
    expected = await translated(client, texts)
    if ext == ".srt":  # timings kept; a blank translation keeps its subtitle's text
        before, after = list(srt.parse(source.decode())), list(srt.parse(got.content.decode()))
        assert [(s.index, s.start, s.end) for s in after] == [(s.index, s.start, s.end) for s in before]
        expected = [e if e.strip() else t for t, e in zip(texts, expected, strict=True)]
    elif ext == ".pptx":
        assert len(pptx.Presentation(io.BytesIO(got.content)).slides) == 2
    if ext not in (".html", ".epub"):  # HTML: its inline tags are placed back inside the translations
        assert texts_of(ext, got.content) == [" ".join(e.split()) for e in expected if e.strip()]


async def test_names_are_unguessable_and_never_listed(client: httpx.AsyncClient) -> None:
    urls = [(await lt_upload(client, "a.txt", make_txt())).json()["translatedFileUrl"] for _ in range(2)]
    assert urls[0] != urls[1]  # 256 random bits each
    name = urls[0].rsplit("/", 1)[1]
    token = name.split(".", 1)[0]
    for other in (
        f"{'A' * 43}.a.txt",  # a well-formed name never made
        f"{token}.b.txt",  # the right token, another name
        f"{token}.json",
        "..%2F..%2Fetc%2Fpasswd",  # a path with "/" matches no route: FastAPI's 404
    ):
        r = await client.get(f"{LT}/download_file/{other}")
        assert r.status_code == 404, (other, r.text)
    for malformed in (token, "%2E%2E", f"{token}.", f"{token}..txt"[:-4] + "-"):  # LibreTranslate's 400
        r = await client.get(f"{LT}/download_file/{malformed}")
        assert (r.status_code, r.json()) == (400, {"error": "Invalid filename"}), malformed
    assert (await client.get(f"{LT}/download_file/")).status_code == 404  # no listing


async def test_expired_files_are_404_and_removed(
    client: httpx.AsyncClient, files_app: tuple[FastAPI, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (await lt_upload(client, "a.txt", make_txt())).json()["translatedFileUrl"]
    settings = files_app[0].state.service.settings
    token = url.rsplit("/", 1)[1].split(".", 1)[0]
    on_disk = {settings.file_dir / f"{token}.{kind}" for kind in ("data", "json")}
    assert all(p.exists() for p in on_disk)
    assert {p.stat().st_mode & 0o777 for p in on_disk} == {0o600}
    assert settings.file_dir.stat().st_mode & 0o777 == 0o700
    later = storage.time.time() + settings.file_ttl_s + 1
    monkeypatch.setattr(storage, "time", SimpleNamespace(time=lambda: later, monotonic=time.monotonic))
    assert (await client.get(url)).status_code == 404
    assert not any(p.exists() for p in on_disk)


async def test_a_tiny_ttl_expires_the_file(make_settings: Callable[..., Settings]) -> None:
    async with serve(make_settings(file_ttl_s=0.05)) as (app, client):
        url = (await lt_upload(client, "a.txt", make_txt())).json()["translatedFileUrl"]
        for _ in range(1000):  # polled until expired (0.05 s after it was stored)
            if (await client.get(url)).status_code == 404:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the file did not expire")
        file_dir = app.state.service.settings.file_dir
        await eventually(lambda: not any(file_dir.iterdir()))


async def test_only_the_key_that_asked_downloads(make_settings: Callable[..., Settings]) -> None:
    async with serve(make_settings(api_key=KEY)) as (_, client):
        assert (await client.get(f"{LT}/frontend/settings")).json()["keyRequired"] is True
        r = await lt_upload(client, "a.txt", make_txt())
        assert r.status_code == 403, r.text
        r = await lt_upload(client, "a.txt", make_txt(), api_key="wrong")
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"})
        r = await lt_upload(client, "a.txt", make_txt(), api_key=KEY)
        assert r.status_code == 200, r.text
        url = r.json()["translatedFileUrl"]
        assert (await client.get(url)).status_code == 403
        assert (await client.get(url, params={"api_key": "wrong"})).status_code == 403
        assert (await client.get(url, headers={"X-API-Key": "wrong"})).status_code == 403
        assert (await client.get(url, params={"api_key": KEY})).status_code == 200
        assert (await client.get(url, headers={"Authorization": f"Bearer {KEY}"})).status_code == 200
        files = {"file": ("a.txt", make_txt())}
        native = {"data": {"source_lang": "fr", "target_lang": "en"}, "files": files}
        assert (await client.post("/translate/file", **native)).status_code == 401
        assert (await client.post("/translate/file", headers={"X-API-Key": KEY}, **native)).status_code == 200


async def test_a_file_stored_with_another_key_is_not_found(tmp_path: Path) -> None:
    """The key's hash is stored with the file: a server restarted with another key cannot open it."""
    store = storage.FileStore(tmp_path, 600)
    name = store.put(b"data", "a.txt", "key-1")
    assert store.get(name, "key-1") == (b"data", "a.txt")
    assert store.get(name, "key-2") is None
    assert store.get(name, None) is None
    assert storage.FileStore(tmp_path, 600).get(store.put(b"x", "b.txt", None), None) == (b"x", "b.txt")


async def test_a_sweep_removes_every_expired_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = storage.FileStore(tmp_path, 600)
    old = [store.put(b"x", "a.txt", None) for _ in range(3)]
    later = time.time() + 601
    monkeypatch.setattr(storage, "time", SimpleNamespace(time=lambda: later, monotonic=lambda: 1e9))
    fresh = storage.FileStore(tmp_path, 600).put(b"y", "b.txt", None)  # sweeps first
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{fresh.split('.')[0]}.{k}" for k in ("data", "json")
    )
    assert all(store.get(name, None) is None for name in old)


async def test_long_paragraphs_are_sent_in_pieces(make_settings: Callable[..., Settings]) -> None:
    """A paragraph over APP_MAX_CHARS goes as pieces of whole sentences, its translation joined back."""
    text = " ".join(["Le chat dort sur le lit."] * 8)  # 199 characters
    async with serve(make_settings(max_chars=60)) as (_, client):
        files = {"file": ("a.txt", text.encode())}
        r = await client.post("/translate/file", data={"source_lang": "fr", "target_lang": "en"}, files=files)
        assert r.status_code == 200, r.text
        pieces = await translated(client, [" ".join(["Le chat dort sur le lit."] * 2)] * 4)
        assert r.content.decode() == " ".join(pieces)


@pytest.mark.parametrize(
    ("name", "data", "fields", "error"),
    [
        ("a.pdf", b"%PDF", FR_EN, "Invalid request: file format not supported"),
        ("a.docx", b"not a zip", FR_EN, "Invalid request: the file is not a Word document"),
        ("a.txt", "Café".encode("latin-1"), FR_EN, "Invalid request: the file is not UTF-8 text"),
        ("a.txt", b"Bonjour", {"target": "en"}, "Invalid request: missing source parameter"),
        ("a.txt", b"Bonjour", {"source": "fr"}, "Invalid request: missing target parameter"),
        ("a.txt", b"Bonjour", {"source": "fr", "target": "zz"}, "zz is not supported"),
    ],
)
async def test_libretranslate_refusals(
    client: httpx.AsyncClient, name: str, data: bytes, fields: dict[str, str], error: str
) -> None:
    r = await client.post(f"{LT}/translate_file", data=fields, files={"file": (name, data)})
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith(error)


async def test_libretranslate_missing_file(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{LT}/translate_file", data=FR_EN)
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: missing file parameter"})


async def test_native_refusals(client: httpx.AsyncClient) -> None:
    form = {"source_lang": "fr", "target_lang": "en"}
    r = await client.post("/translate/file", data=form, files={"file": ("a.pdf", b"%PDF")})
    assert r.status_code == 415, r.text
    r = await client.post("/translate/file", data=form, files={"file": ("a.pptx", b"PK")})
    assert r.status_code == 400, r.text
    r = await client.post(
        "/translate/file", data=form | {"source_lang": "xx"}, files={"file": ("a.txt", b"Bonjour")}
    )
    assert r.status_code == 404, r.text
    english = b"The cat sleeps on the sofa. It is a sunny day in the garden."
    r = await client.post(
        "/translate/file",
        data={"source_lang": "auto", "target_lang": "fr"},
        files={"file": ("a.txt", english)},
    )
    assert r.status_code == 422, r.text  # as /translate's "auto": the detected language has no model into fr
    assert r.json()["detail"] == [
        {
            "loc": ["body", "file"],
            "msg": "file: detected language 'en' (confidence 1.00), but no model translates it into fr "
            "(served sources: de)",
            "type": "unsupported_language",
        }
    ]


async def test_auto_detects_the_files_language(client: httpx.AsyncClient) -> None:
    r = await lt_upload(client, "a.txt", make_txt(), source="auto")
    assert r.status_code == 200, r.text
    got = await client.get(r.json()["translatedFileUrl"])
    expected = await translated(client, texts_of(".txt", make_txt()))
    assert texts_of(".txt", got.content) == [e for e in expected if e.strip()]

"""Glossaries stored by id (issue 45): /glossaries' create, list, get, entries and delete; each API key sees its
own; the limits named; `glossary_id` on /translate, the LibreTranslate API and both file routes translates as
the same inline glossary does (tiny checkpoints); two apps on one APP_GLOSSARY_DIR (two HTTP processes) see
the same glossaries."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.core.settings import Settings
from tests.app.conftest import EAGER, serve
from tests.app.sample_files import make_txt
from tests.app.test_glossary import translate

pytestmark = pytest.mark.anyio

LT = "/libretranslate"
TERMS = {"chat": "Kitty", "canapé": "COUCH"}
BODY = {"name": "furniture", "source_lang": "fr", "target_lang": "en", "entries": TERMS}
TEXTS = ["Le chat dort sur le canapé.", "Mon chat est noir."]
ID = re.compile(r"[A-Za-z0-9_-]{43}")


@pytest.fixture(scope="module")
def glossary_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("glossaries")


@pytest.fixture(scope="module")
async def served(
    app_checkpoint_dir: Path, glossary_dir: Path
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = Settings(checkpoint_dir=app_checkpoint_dir, glossary_dir=glossary_dir, **EAGER)
    async with serve(settings) as pair:
        yield pair


@pytest.fixture
def client(served: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return served[1]


def said(r: httpx.Response) -> str:
    """An error's words: the native detail (its messages) or LibreTranslate's error."""
    body = r.json()
    if "error" in body:
        return str(body["error"])
    detail = body["detail"]
    return detail if isinstance(detail, str) else " | ".join(d["msg"] for d in detail)


async def create(client: httpx.AsyncClient, body: dict[str, Any] = BODY, **headers: str) -> dict[str, Any]:
    r = await client.post("/glossaries", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def translate_by_id(
    client: httpx.AsyncClient, texts: list[str], glossary_id: str, **extra: Any
) -> list[str]:
    body = {"texts": texts, "source_lang": "fr", "target_lang": "en", "glossary_id": glossary_id} | extra
    r = await client.post("/translate", json=body)
    assert r.status_code == 200, r.text
    return [x["translation"] for x in r.json()["results"]]


async def test_create_list_get_entries_delete(client: httpx.AsyncClient) -> None:
    made = await create(client)
    assert ID.fullmatch(made["glossary_id"]), made
    assert made | {"glossary_id": "", "creation_time": ""} == {
        "glossary_id": "", "name": "furniture", "source_lang": "fr", "target_lang": "en", "entry_count": 2,
        "creation_time": "",
    }  # fmt: skip
    assert made["creation_time"].endswith("Z")
    gid = made["glossary_id"]
    listed = (await client.get("/glossaries")).json()["glossaries"]
    assert made in listed
    assert (await client.get(f"/glossaries/{gid}")).json() == made
    assert (await client.get(f"/glossaries/{gid}/entries")).json() == {"entries": TERMS}
    r = await client.delete(f"/glossaries/{gid}")
    assert (r.status_code, r.content) == (204, b"")
    for method, path in [("GET", gid), ("GET", f"{gid}/entries"), ("DELETE", gid)]:
        r = await client.request(method, f"/glossaries/{path}")
        assert r.status_code == 404, (method, path, r.text)
    assert made not in (await client.get("/glossaries")).json()["glossaries"]


@pytest.mark.parametrize("gid", ["x" * 43, "nope", "%2e%2e", "A" * 100])
async def test_unknown_ids_are_404s(client: httpx.AsyncClient, gid: str) -> None:
    for path in (f"/glossaries/{gid}", f"/glossaries/{gid}/entries"):
        r = await client.get(path)
        assert r.status_code == 404, (path, r.text)
    assert (await client.delete(f"/glossaries/{gid}")).status_code == 404
    r = await client.post("/translate", json={"text": "Le chat.", "source_lang": "fr", "glossary_id": gid})
    assert r.status_code == 404, r.text
    assert "no glossary" in r.json()["detail"]


async def test_each_api_key_sees_its_own(app_checkpoint_dir: Path, tmp_path: Path) -> None:
    def keyed(key: str) -> Settings:
        return Settings(checkpoint_dir=app_checkpoint_dir, glossary_dir=tmp_path, api_key=key, **EAGER)

    async with serve(keyed("key-a"), ready=False) as (_, a), serve(keyed("key-b"), ready=False) as (_, b):
        assert (await a.post("/glossaries", json=BODY)).status_code == 401  # the key is needed
        assert (await a.get("/glossaries")).status_code == 401
        made = await create(a, **{"X-API-Key": "key-a"})
        gid, as_b = made["glossary_id"], {"X-API-Key": "key-b"}
        assert (await b.get("/glossaries", headers=as_b)).json() == {"glossaries": []}
        assert (await b.get(f"/glossaries/{gid}", headers=as_b)).status_code == 404
        assert (await b.get(f"/glossaries/{gid}/entries", headers=as_b)).status_code == 404
        assert (await b.delete(f"/glossaries/{gid}", headers=as_b)).status_code == 404
        r = await a.get("/glossaries", headers={"Authorization": "Bearer key-a"})
        assert r.json() == {"glossaries": [made]}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"entries": {f"mot{k}": "word" for k in range(101)}},
            "at most 100 terms per glossary (APP_MAX_GLOSSARY_TERMS)",
        ),
        ({"entries": {"chat": "c" * 101}}, "at most 100 characters per term (APP_MAX_TERM_CHARS), got 101"),
        ({"entries": {"Chat": "cat", "chat": "kitty"}}, "source terms must differ ignoring case"),
        ({"entries": {}}, "entries"),
        ({"entries": {"chat": " "}}, "must not be empty"),
        ({"source_lang": "auto"}, "source_lang"),
        ({"target_lang": "e"}, "target_lang"),
        ({"name": ""}, "name"),
    ],
)
async def test_glossary_limits_and_rules_are_422s(
    client: httpx.AsyncClient, change: dict[str, Any], words: str
) -> None:
    r = await client.post("/glossaries", json=BODY | change)
    assert r.status_code == 422, r.text
    assert words in said(r), r.text


async def test_the_store_holds_at_most_app_max_glossaries(app_checkpoint_dir: Path, tmp_path: Path) -> None:
    settings = Settings(checkpoint_dir=app_checkpoint_dir, glossary_dir=tmp_path, max_glossaries=2, **EAGER)
    async with serve(settings, ready=False) as (_, c):
        first = await create(c)
        await create(c)
        r = await c.post("/glossaries", json=BODY)
        assert r.status_code == 409, r.text
        assert "2 glossaries (APP_MAX_GLOSSARIES)" in r.json()["detail"]
        assert (await c.delete(f"/glossaries/{first['glossary_id']}")).status_code == 204
        await create(c)


async def test_glossary_id_translates_as_the_same_inline_glossary(client: httpx.AsyncClient) -> None:
    gid = (await create(client))["glossary_id"]
    outs = await translate_by_id(client, TEXTS, gid)
    assert outs == await translate(client, TEXTS, TERMS)
    assert all("Kitty" in out for out in outs), outs  # the terms came out (the tiny model's words do not)
    fields = {"q": TEXTS, "source": "fr", "target": "en"}
    by_id = await client.post(f"{LT}/translate", json=fields | {"glossary_id": gid})
    inline = await client.post(f"{LT}/translate", json=fields | {"glossary": TERMS})
    assert by_id.status_code == inline.status_code == 200, (by_id.text, inline.text)
    assert by_id.json() == inline.json()
    form = await client.post(
        f"{LT}/translate", data={"q": TEXTS[0], "source": "fr", "target": "en", "glossary_id": gid}
    )
    assert form.json()["translatedText"] == inline.json()["translatedText"][0]


async def test_glossary_id_with_auto_needs_the_detected_language(client: httpx.AsyncClient) -> None:
    gid = (await create(client))["glossary_id"]
    auto = {"source_lang": "auto", "target_lang": "en"}
    by_id = await client.post("/translate", json={"texts": TEXTS, "glossary_id": gid} | auto)
    inline = await client.post("/translate", json={"texts": TEXTS, "glossary": TERMS} | auto)
    assert by_id.status_code == inline.status_code == 200, (by_id.text, inline.text)
    assert by_id.json() == inline.json()
    german = "Der Hund schläft heute im großen Garten hinter dem Haus."
    r = await client.post("/translate", json={"texts": [TEXTS[0], german], "glossary_id": gid} | auto)
    assert r.status_code == 422, r.text
    assert "the glossary is for fr -> en, and texts[1] is detected as de" in said(r), r.text


@pytest.mark.parametrize(
    ("extra", "status", "words"),
    [
        ({"glossary": TERMS}, 422, 'give "glossary" or "glossary_id", not both'),
        ({"replace_unknowns": False}, 422, "a glossary needs replace_unknowns true"),
        ({"source_lang": "de"}, 422, "the glossary is for fr -> en, not de -> en"),
        ({"target_lang": "fr"}, 422, "the glossary is for fr -> en, not fr -> fr"),
    ],
)
async def test_glossary_id_rules(
    client: httpx.AsyncClient, extra: dict[str, Any], status: int, words: str
) -> None:
    gid = (await create(client))["glossary_id"]
    body = {"text": TEXTS[0], "source_lang": "fr", "target_lang": "en", "glossary_id": gid} | extra
    r = await client.post("/translate", json=body)
    assert r.status_code == status, r.text
    assert words in said(r), r.text
    fields = {"q": TEXTS[0], "source": body["source_lang"], "target": body["target_lang"], "glossary_id": gid}
    if "replace_unknowns" not in extra:  # not a LibreTranslate field
        r = await client.post(
            f"{LT}/translate", json=fields | {k: v for k, v in extra.items() if k == "glossary"}
        )
        assert r.status_code == 400, r.text
        assert words in said(r), r.text


async def test_the_file_routes_take_a_glossary_or_its_id(client: httpx.AsyncClient) -> None:
    gid = (await create(client))["glossary_id"]
    upload = {"file": ("notes.txt", make_txt())}
    fr_en = {"source_lang": "fr", "target_lang": "en"}
    by_id = await client.post("/translate/file", data=fr_en | {"glossary_id": gid}, files=upload)
    inline = await client.post("/translate/file", data=fr_en | {"glossary": json.dumps(TERMS)}, files=upload)
    plain = await client.post("/translate/file", data=fr_en, files=upload)
    assert by_id.status_code == inline.status_code == plain.status_code == 200, (by_id.text, inline.text)
    assert by_id.content == inline.content != plain.content
    lt = await client.post(
        f"{LT}/translate_file", data={"source": "fr", "target": "en", "glossary_id": gid}, files=upload
    )
    assert lt.status_code == 200, lt.text
    assert (await client.get(lt.json()["translatedFileUrl"])).content == by_id.content
    r = await client.post("/translate/file", data=fr_en | {"glossary_id": "x" * 43}, files=upload)
    assert r.status_code == 404, r.text
    r = await client.post("/translate/file", data=fr_en | {"glossary": "{not json"}, files=upload)
    assert r.status_code == 422, r.text
    assert said(r).startswith("glossary: is not a JSON object"), r.text
    r = await client.post(
        "/translate/file", data=fr_en | {"glossary": json.dumps(TERMS), "glossary_id": gid}, files=upload
    )
    assert r.status_code == 422, r.text
    lt_fields = {"source": "fr", "target": "en"}
    for extra, words in [
        ({"glossary_id": "x" * 43}, "no glossary"),
        ({"glossary": "[1]"}, "is not a JSON object"),
    ]:
        r = await client.post(f"{LT}/translate_file", data=lt_fields | extra, files=upload)
        assert r.status_code == 400, r.text
        assert words in said(r), r.text


async def test_two_apps_on_one_directory_share_their_glossaries(
    client: httpx.AsyncClient, app_checkpoint_dir: Path, glossary_dir: Path
) -> None:
    """As two HTTP processes (APP_HTTP_WORKERS) do: what one stores, the other lists, uses and deletes."""
    other = Settings(checkpoint_dir=app_checkpoint_dir, glossary_dir=glossary_dir, **EAGER)
    async with serve(other, ready=False) as (_, second):
        made = await create(second)
        gid = made["glossary_id"]
        assert made in (await client.get("/glossaries")).json()["glossaries"]
        assert await translate_by_id(client, TEXTS, gid) == await translate(client, TEXTS, TERMS)
        assert (await client.delete(f"/glossaries/{gid}")).status_code == 204
        assert (await second.get(f"/glossaries/{gid}")).status_code == 404
    assert glossary_dir.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in glossary_dir.iterdir())

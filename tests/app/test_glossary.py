"""Glossaries through POST /translate and the LibreTranslate API: on the shipped fr-en translator with both
engines, every term comes out exactly as given (longest match first, at word boundaries, ignoring case); on
the tiny checkpoints, the limits and rules refused with a message naming them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from tests.app.conftest import serve
from tests.conftest import link_checkpoints

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
FR_EN = SHIPPED / "translate-fr-en"
shipped = pytest.mark.skipif(not (FR_EN / "config.json").is_file(), reason="no shipped fr-en translator")
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["torch", "ctranslate2"])
async def real(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Any]:
    if not (FR_EN / "config.json").is_file():
        pytest.skip("no shipped fr-en translator")
    if request.param == "ctranslate2":
        pytest.importorskip("ctranslate2")
    root = link_checkpoints(tmp_path_factory.mktemp("shipped"), FR_EN)
    settings = Settings(
        checkpoint_dir=root, translation_engine=request.param, torchscript=False, warmup=False
    )
    async with serve(settings) as (_, c):
        yield c


async def translate(client: httpx.AsyncClient, texts: list[str], glossary: dict[str, str]) -> list[str]:
    body = {"texts": texts, "source_lang": "fr", "target_lang": "en", "glossary": glossary}
    r = await client.post("/translate", json=body)
    assert r.status_code == 200, r.text
    return [x["translation"] for x in r.json()["results"]]


@shipped
async def test_every_term_comes_out_as_given(real: httpx.AsyncClient) -> None:
    glossary = {"chat": "Kitty", "canapé": "COUCH", "salle de bain": "wash-room", "Tom": "Thomas"}
    texts = [
        "Le chat dort sur le canapé.",
        "Tom est dans la salle de bain.",
        "Le chat de Tom est noir. Il aime le canapé.",  # two sentences
    ]
    outs = await translate(real, texts, glossary)
    wanted = [["Kitty", "COUCH"], ["Thomas", "wash-room"], ["Kitty", "Thomas", "COUCH"]]
    for out, terms in zip(outs, wanted, strict=True):
        for term in terms:
            assert out.count(term) == 1, (term, out)


@shipped
async def test_the_longest_match_wins_at_word_boundaries_ignoring_case(real: httpx.AsyncClient) -> None:
    glossary = {"machine": "ENGINE", "machine à laver": "washer-dryer", "CHAT": "Kitty"}
    longest, boundary, case = await translate(
        real, ["J'ai une machine à laver.", "Le chateau est grand.", "Mon CHAT dort."], glossary
    )
    assert "washer-dryer" in longest, longest
    assert "ENGINE" not in longest, longest
    assert "Kitty" not in boundary, boundary  # "chat" is not in "chateau"
    assert "Kitty" in case, case


@shipped
async def test_the_libretranslate_route_takes_a_glossary(real: httpx.AsyncClient) -> None:
    glossary = {"canapé": "COUCH"}
    fields = {"q": "Le chat dort sur le canapé.", "source": "fr", "target": "en"}
    r = await real.post("/libretranslate/translate", json=fields | {"glossary": glossary})
    assert r.status_code == 200, r.text
    assert "COUCH" in r.json()["translatedText"]
    r = await real.post("/libretranslate/translate", data=fields | {"glossary": json.dumps(glossary)})
    assert r.status_code == 200, r.text
    assert "COUCH" in r.json()["translatedText"]
    files = {k: (None, v) for k, v in (fields | {"glossary": json.dumps(glossary)}).items()}
    r = await real.post("/libretranslate/translate", files=files)  # multipart
    assert r.status_code == 200, r.text
    assert "COUCH" in r.json()["translatedText"]


FR = {"text": "Le chat dort.", "source_lang": "fr", "target_lang": "en"}


@pytest.mark.parametrize(
    ("glossary", "extra", "words"),
    [
        (
            {f"mot{k}": "word" for k in range(101)},
            {},
            "at most 100 terms per glossary (APP_MAX_GLOSSARY_TERMS)",
        ),
        ({"chat": "c" * 101}, {}, "at most 100 characters per term (APP_MAX_TERM_CHARS), got 101"),
        ({"c" * 101: "cat"}, {}, "at most 100 characters per term (APP_MAX_TERM_CHARS)"),
        ({"Chat": "cat", "chat ": "kitty"}, {}, "source terms must differ ignoring case"),
        ({" ": "cat"}, {}, "must not be empty"),
        ({"chat": ""}, {}, "must not be empty"),
        ({"chat": "cat"}, {"replace_unknowns": False}, "a glossary needs replace_unknowns true"),
    ],
)
async def test_glossary_limits_and_rules_are_422s(
    client: httpx.AsyncClient, glossary: dict[str, str], extra: dict[str, Any], words: str
) -> None:
    r = await client.post("/translate", json=FR | {"glossary": glossary} | extra)
    assert r.status_code == 422, r.text
    assert words in r.text, r.text


async def test_an_empty_glossary_is_none(client: httpx.AsyncClient) -> None:
    r = await client.post("/translate", json=FR | {"glossary": {}, "replace_unknowns": False})
    assert r.status_code == 200, r.text


async def test_libretranslate_glossary_errors_are_400s(client: httpx.AsyncClient) -> None:
    fields = {"q": "Le chat dort.", "source": "fr", "target": "en"}
    for glossary, words in [
        ("{not json", "glossary: is not a JSON object"),
        ('["chat"]', "glossary"),
        (json.dumps({f"mot{k}": "word" for k in range(101)}), "APP_MAX_GLOSSARY_TERMS"),
    ]:
        r = await client.post("/libretranslate/translate", data=fields | {"glossary": glossary})
        assert r.status_code == 400, r.text
        assert words in r.json()["error"], r.text
    r = await client.post("/libretranslate/translate", json=fields | {"glossary": {"Chat": "a", "chat": "b"}})
    assert r.status_code == 400, r.text
    assert "differ ignoring case" in r.json()["error"]


async def test_the_document_states_the_glossary_limits(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    glossary = next(
        b for b in schemas["TranslateRequest"]["properties"]["glossary"]["anyOf"] if b["type"] == "object"
    )
    assert glossary["maxProperties"] == 100
    assert glossary["x-limit"] == {"maxProperties": "APP_MAX_GLOSSARY_TERMS"}
    assert glossary["propertyNames"]["maxLength"] == glossary["additionalProperties"]["maxLength"] == 100
    spec = (await client.get("/libretranslate/spec")).json()["paths"]["/libretranslate/translate"]["post"]
    content = spec["requestBody"]["content"]
    assert "object" in json.dumps(content["application/json"]["schema"]["properties"]["glossary"])
    form = content["application/x-www-form-urlencoded"]["schema"]["properties"]["glossary"]
    assert form["type"] == "string"
    assert form["contentSchema"]["maxProperties"] == 100

"""Input gaps: an API key that no header can carry, model names capped, invisible text refused, 400s that say
what is wrong, and an OpenAPI schema that matches what the service does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import sentencepiece as spm
import torch

from app.core.settings import REPO_ROOT, Settings, SettingsError, load_settings
from app.registry import Registry
from app.schemas import MAX_MODEL_NAME
from app.text.blank import is_blank
from model import CheckpointError
from tests.app.conftest import EAGER, eager_settings, serve

pytestmark = pytest.mark.anyio
JSON = {"content-type": "application/json"}
KEY = "s3cret"


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Apps of this module's own run eager models: they test the HTTP surface, not the graphs."""
    return eager_settings(make_settings)


# --- the API key: one that no header can carry fails start-up (how it is read: test_api_key_and_cors.py) ---


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("clé-secrète", "non-ASCII character at position 2"),
        ("s3cret\n", "leading or trailing whitespace"),
        (" s3cret", "leading or trailing whitespace"),
        ("s3c\x1bret", "control character at position 3"),
    ],
)
def test_an_api_key_that_can_never_match_fails_start_up(
    monkeypatch: pytest.MonkeyPatch, key: str, why: str
) -> None:
    monkeypatch.setenv("APP_API_KEY", key)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert f"APP_API_KEY (api_key): {why}" in str(info.value)
    assert key.strip() not in str(info.value)  # never shown
    assert "\n" not in str(info.value)


def test_python_m_app_names_a_non_ascii_api_key_in_one_line() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    proc = subprocess.run(
        [sys.executable, "-m", "app"],
        env=clean | {"APP_API_KEY": "clé"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "APP_API_KEY (api_key): non-ASCII character" in lines[0]
    assert "clé" not in proc.stderr


# --- model names: capped in the schema, bounded in the 404 ------------------------------------------------

MODEL_BODIES = [
    ("/sentiment", {"text": "a"}),
    ("/translate", {"text": "a", "source_lang": "fr"}),
    ("/attention", {"text": "a"}),
]


@pytest.mark.parametrize(("route", "body"), MODEL_BODIES)
async def test_a_model_name_is_capped_and_not_echoed_whole(
    client: httpx.AsyncClient, route: str, body: dict[str, Any]
) -> None:
    r = await client.post(route, json=body | {"model": "x" * 5000})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"] == f"model: at most {MAX_MODEL_NAME} characters (got 5000)"
    assert len(r.text) < 300
    r = await client.post(route, json=body | {"model": "y" * MAX_MODEL_NAME})
    assert r.status_code == 404
    assert "y" * 41 not in r.json()["detail"]  # the name is echoed cut short
    assert "'yyyy" in r.json()["detail"]


async def test_a_checkpoint_no_request_could_name_fails_start_up(
    tmp_path: Path, tiny_sentiment_checkpoint: Path
) -> None:
    (tmp_path / ("m" * (MAX_MODEL_NAME + 1))).symlink_to(tiny_sentiment_checkpoint, target_is_directory=True)
    with pytest.raises(CheckpointError, match=f"at most {MAX_MODEL_NAME} characters"):
        Registry.discover(tmp_path, torch.device("cpu"), torch.float32)


# --- text that is blank once invisible characters are dropped ---------------------------------------------

INVISIBLE = [
    "\u200b",
    "\ufeff",
    "\u200b\u200c\u200d\u2060",
    "\u00ad",
    " \u200b\n\t",
    "\x01\x7f",
    "\U000e0001",
]
BLANK_BODIES: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("/sentiment", lambda t: {"text": t}, "text"),
    ("/sentiment", lambda t: {"texts": ["fine", t]}, "texts[1]"),
    ("/translate", lambda t: {"text": t, "source_lang": "fr"}, "text"),
    ("/translate", lambda t: {"texts": [t], "source_lang": "fr"}, "texts[0]"),
    ("/attention", lambda t: {"model": "sentiment-en", "text": t}, "text"),
    ("/attention", lambda t: {"model": "translate-fr-en", "text": "le chat", "target": t}, "target"),
]


@pytest.mark.parametrize("text", INVISIBLE, ids=[t.encode("unicode_escape").decode() for t in INVISIBLE])
@pytest.mark.parametrize(("route", "body", "field"), BLANK_BODIES)
async def test_invisible_text_is_422_like_empty_text(
    client: httpx.AsyncClient, route: str, body: Callable[[str], dict[str, Any]], field: str, text: str
) -> None:
    r = await client.post(route, json=body(text))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["msg"].startswith(f"{field}: must not be empty or whitespace only")


async def test_visible_text_with_invisible_characters_is_served(client: httpx.AsyncClient) -> None:
    for text in ("\u200bfine", "\ufeffa good film", "👍", "👨\u200d👩", "a\u00ad"):
        assert (await client.post("/sentiment", json={"text": text})).status_code == 200, text


async def test_an_invisible_line_translates_as_an_empty_line(client: httpx.AsyncClient) -> None:
    async def translate(text: str) -> str:
        r = await client.post("/translate", json={"text": text, "source_lang": "fr", "beam_size": 1})
        assert r.status_code == 200, r.text
        return str(r.json()["results"][0]["translation"])

    empty = await translate("le chat.\n\nun chien.")
    assert await translate("le chat.\n\u200b\ufeff\nun chien.") == empty
    assert await translate("le chat. \u200b") == await translate("le chat.")


def test_blank_covers_every_control_format_and_space_character() -> None:
    for code in range(sys.maxunicode + 1):
        c = chr(code)
        if unicodedata.category(c) in ("Cc", "Cf") or c.isspace():
            assert is_blank(c), hex(code)
    for text in ("a", "\u200ba", "👍", "\u0301", "\ue000", "ᄀ", "\u2800", "\u2581a"):
        assert not is_blank(text), text


def test_every_character_the_tokenizers_drop_is_blank(tiny_tokenizer_path: Path) -> None:
    """What sentencepiece's normalization (nmt_nfkc) removes entirely, the schema refuses as blank."""
    paths = [tiny_tokenizer_path, *sorted(REPO_ROOT.glob("checkpoints/*/tokenizer.model"))]
    chars = [chr(c) for c in (*range(0xD800), *range(0xE000, 0x10000), *range(0xE0000, 0xE1000))]
    for path in paths:
        sp = spm.SentencePieceProcessor(model_file=str(path))
        dropped = [c for c, ids in zip(chars, sp.encode(chars), strict=True) if not ids]
        assert dropped, path  # at least the zero-width space and the BOM
        assert [hex(ord(c)) for c in dropped if not is_blank(c)] == [], path


# --- 400s that say what is wrong --------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def without(app_checkpoint_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The same app with APP_FAST_PATH=false: every request through FastAPI."""
    async with serve(Settings(checkpoint_dir=app_checkpoint_dir, fast_path=False, **EAGER)) as (_, client):
        yield client


DEEP = b"[" * 1000 + b"]" * 1000
DIGITS = b"9" * 5000
UNPARSABLE = [
    (b'{"text": ' + DEEP + b"}", "JSON nested too deeply"),
    (b'{"text": ' + b"[" * 100_000, "JSON nested too deeply"),
    (DEEP, "JSON nested too deeply"),
    (b'{"text": "a", "source_lang": "fr", "beam_size": ' + DIGITS + b"}", "an integer of more than 4300 digits"),
    (b'{"text": "a", "model": -' + DIGITS + b"}", "an integer of more than 4300 digits"),
    (b'{"text": "caf\xe9"}', "not UTF-8: byte 0xe9 at position 13"),
]  # fmt: skip


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize(("body", "why"), UNPARSABLE, ids=[w for _, w in UNPARSABLE])
@pytest.mark.parametrize("route", ["/sentiment", "/translate", "/attention"])
async def test_an_unparsable_body_is_400_saying_what_is_wrong(
    client: httpx.AsyncClient,
    without: httpx.AsyncClient,
    fast_path: bool,
    route: str,
    body: bytes,
    why: str,
) -> None:
    r = await (client if fast_path else without).post(route, content=body, headers=JSON)
    assert r.status_code == 400
    assert r.json()["detail"].startswith(f"body: cannot be parsed: {why}"), r.json()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"text": ' + b"[" * 50 + b"]" * 50 + b"}", "text: Input should be a valid string"),
        (b'{"text": "a", "source_lang": "fr", "beam_size": 1' + b"0" * 4299 + b"}", "beam_size: Input should be less"),
        (b'{"text": "a", "source_lang": "fr", "length_penalty": ' + DIGITS + b".5}", "length_penalty: Input should be a finite"),
        (b'{"text": "a",', "body: invalid JSON"),
    ],
)  # fmt: skip
async def test_other_malformed_bodies_keep_their_422(
    client: httpx.AsyncClient, without: httpx.AsyncClient, body: bytes, message: str
) -> None:
    for c in (client, without):
        r = await c.post("/translate", content=body, headers=JSON)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["msg"].startswith(message)


@pytest.mark.parametrize(
    ("headers", "status", "why"),
    [
        ({"transfer-encoding": "gzip, chunked"}, 501, "Transfer-Encoding gzip, chunked is not supported"),
        ({"content-encoding": "gzip"}, 415, "Content-Encoding gzip is not supported"),
        ({"content-encoding": "br, identity"}, 415, "Content-Encoding br, identity is not supported"),
    ],
)
async def test_a_coded_body_is_refused_before_it_is_read(
    client: httpx.AsyncClient, headers: dict[str, str], status: int, why: str
) -> None:
    for route in ("/sentiment", "/attention"):
        body = json.dumps({"model": "sentiment-en", "text": "a"} if route == "/attention" else {"text": "a"})
        r = await client.post(route, content=body.encode(), headers=JSON | headers)
        assert r.status_code == status, r.text
        assert r.json()["detail"].startswith(why)
        assert "send the body uncompressed" in r.json()["detail"]
    ok = await client.post("/sentiment", json={"text": "a"}, headers={"content-encoding": "identity"})
    assert ok.status_code == 200


# --- OpenAPI and the public routes ------------------------------------------------------------------------


def request_schema(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}


async def test_openapi_lists_the_errors_of_the_post_routes(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    for path in ("/sentiment", "/translate", "/attention"):
        codes = set(spec["paths"][path]["post"]["responses"])
        assert {"400", "401", "404", "413", "415", "422", "429", "500", "503", "504"} <= codes, path


@pytest.mark.parametrize("route", ["/sentiment", "/translate"])
async def test_openapi_says_exactly_one_of_text_and_texts(client: httpx.AsyncClient, route: str) -> None:
    """The schema accepts exactly the text/texts combinations that the service accepts."""
    spec = (await client.get("/openapi.json")).json()
    schema = request_schema(spec, "SentimentRequest" if route == "/sentiment" else "TranslateRequest")
    extra = {} if route == "/sentiment" else {"source_lang": "fr", "beam_size": 1}
    for texts in (
        {"text": "a"}, {"texts": ["a"]}, {"text": "a", "texts": None}, {"text": None, "texts": ["a"]},
        {}, {"text": "a", "texts": ["b"]}, {"text": None}, {"text": None, "texts": None},
    ):  # fmt: skip
        body = texts | extra
        served = (await client.post(route, json=body)).status_code == 200
        valid = jsonschema.Draft202012Validator(schema).is_valid(body)
        assert served == valid, body


async def test_openapi_says_target_is_for_translators_only(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    props = spec["components"]["schemas"]["AttentionRequest"]["properties"]
    for field in ("target", "target_lang"):
        assert props[field]["description"].startswith("Translation models only (422 for a classifier)")
    r = await client.post("/attention", json={"model": "sentiment-en", "text": "a", "target": "b"})
    assert r.status_code == 422


async def test_the_public_routes_are_the_documented_ones(make_settings: Callable[..., Settings]) -> None:
    public = ["/health", "/ready", "/docs", "/redoc", "/openapi.json", "/"]
    async with serve(make_settings(api_key=KEY)) as (app, client):
        for path in public:
            assert (await client.get(path)).status_code == 200, path
        spec = (await client.get("/openapi.json")).json()
        for path, ops in spec["paths"].items():
            if path.startswith("/libretranslate/"):  # LibreTranslate's own key rules: test_libretranslate.py
                continue
            keyed = all("security" in op for op in ops.values())
            assert keyed == (path not in public), path
            if keyed:  # the admin API: its own key, off without it (test_model_management.py)
                off = 403 if path.startswith("/admin/") else 401
                assert (await client.get(path)).status_code in (off, 405), path
    description = spec["info"]["description"]
    readme = (REPO_ROOT / "README.md").read_text()
    for path in ("/health", "/ready", "/docs", "/redoc", "/openapi.json"):
        assert f"`{path}`" in description, path
        assert f"`{path}`" in readme.split("**Access.**")[1].split("## Configuration")[0], path

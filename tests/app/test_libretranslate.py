"""The LibreTranslate-compatible API, in process: bodies (JSON, urlencoded, multipart), answers and errors in
LibreTranslate's shapes, HTML kept, the key in the body; the tiny models translate nonsense, so answers are
compared with the native /translate's for the same input."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from app.tasks.handlers import TranslationHandler
from app.text.html import HtmlDocument
from tests.app.conftest import eager_settings, eventually, serve

pytestmark = pytest.mark.anyio
LT = "/libretranslate"


@pytest.fixture
def make_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Apps of this module's own run eager models: they test the HTTP surface, not the graphs."""
    return eager_settings(make_settings)


async def native(client: httpx.AsyncClient, texts: list[str], source: str = "fr", **kw: Any) -> list[Any]:
    """The native /translate results for `texts` (LibreTranslate's defaults: beam 4 unless more are asked)."""
    r = await client.post("/translate", json={"texts": texts, "source_lang": source} | kw)
    assert r.status_code == 200, r.text
    return r.json()["results"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("body", ["json", "form", "multipart"])
async def test_translate_a_string_in_every_body_kind(client: httpx.AsyncClient, body: str) -> None:
    fields = {"q": "Le chat dort. Il lit.", "source": "fr", "target": "en"}
    if body == "json":
        r = await client.post(f"{LT}/translate", json=fields)
    elif body == "form":
        r = await client.post(f"{LT}/translate", data=fields)
    else:  # as a browser's FormData sends it
        kind = f"multipart/form-data; boundary={BOUNDARY}"
        r = await client.post(f"{LT}/translate", content=_multipart(fields), headers={"content-type": kind})
    assert r.status_code == 200, r.text
    [expected] = await native(client, [fields["q"]])
    assert r.json() == {"translatedText": expected["translation"]}


BOUNDARY = "----lt-test-boundary"


def _multipart(fields: dict[str, str]) -> bytes:
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in fields.items()
    ]
    return ("".join(parts) + f"--{BOUNDARY}--\r\n").encode()


async def test_translate_a_list_with_blank_texts_and_alternatives(client: httpx.AsyncClient) -> None:
    # blank: whitespace, or characters no model reads (a zero-width space, a C1 control)
    q = ["Le chat dort.", "  ", "Il fait beau. Je lis.", "\u200b\x95"]
    r = await client.post(f"{LT}/translate", json={"q": q, "source": "fr", "target": "en", "alternatives": 2})
    assert r.status_code == 200, r.text
    got = r.json()
    expected = await native(client, [q[0], q[2]], beam_size=4, num_hypotheses=3)
    assert got["translatedText"] == [expected[0]["translation"], "", expected[1]["translation"], ""]
    alts = [[h["translation"] for h in e["hypotheses"][1:]] for e in expected]
    assert got["alternatives"] == [alts[0], [], alts[1], []]
    assert set(got) == {"translatedText", "alternatives"}  # no detectedLanguage without "auto"
    # a form repeats q for a list; "alternatives" is a string there
    r = await client.post(
        f"{LT}/translate", data={"q": [q[0], q[2]], "source": "fr", "target": "en", "alternatives": "2"}
    )
    assert r.json() == {
        "translatedText": [got["translatedText"][0], got["translatedText"][2]],
        "alternatives": alts,
    }


async def test_alternatives_of_a_string_and_more_than_the_default_beam(client: httpx.AsyncClient) -> None:
    q = "Le chien mange une pomme rouge."
    r = await client.post(f"{LT}/translate", json={"q": q, "source": "fr", "target": "en", "alternatives": 5})
    [expected] = await native(client, [q], beam_size=6, num_hypotheses=6)
    assert r.json() == {
        "translatedText": expected["translation"],
        "alternatives": [h["translation"] for h in expected["hypotheses"][1:]],
    }


async def test_html_keeps_markup_and_sends_every_text_node_in_one_batch(
    app: Any, client: httpx.AsyncClient
) -> None:
    doc = (
        "<!DOCTYPE html><html><head><title>Le chat</title><style>p { color: red }</style></head>\n"
        "<body><p class=\"intro\" data-x='1 &amp; 2'>Le chat <b>dort</b>&nbsp;!</p>\n"
        "  <script>var s = '<p>Le chien</p>';</script><!-- Le commentaire --> <br/>2024<img alt=\"Le chat\"></body></html>"
    )
    second = "<div>Il lit.</div>"
    texts = HtmlDocument(doc).texts + HtmlDocument(second).texts
    assert texts == ["Le chat", "Le chat dort\xa0!", "Il lit."]  # by block: <b> is inside the sentence
    service = app.state.service
    calls: list[int] = []
    answer = service.answer

    async def counted(task: str, req: Any, *args: Any, **kw: Any) -> Any:
        calls.append(len(req.inputs[0]))
        return await answer(task, req, *args, **kw)

    service.answer = counted
    try:
        r = await client.post(
            f"{LT}/translate", json={"q": [doc, second], "source": "fr", "target": "en", "format": "html"}
        )
    finally:
        del service.answer
    assert calls == [3], "one service call with every block"
    assert r.status_code == 200, r.text
    t = [x["translation"] for x in await native(client, texts)]
    esc = [s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for s in t]
    out = r.json()["translatedText"]
    assert out == [HtmlDocument(doc).render(t[:2]), f"<div>{esc[2]}</div>"]
    head = f"<!DOCTYPE html><html><head><title>{esc[0]}</title><style>p {{ color: red }}</style></head>\n"
    tail = (
        "</p>\n  <script>var s = '<p>Le chien</p>';</script><!-- Le commentaire --> <br/>2024"
        '<img alt="Le chat"></body></html>'
    )
    assert out[0].startswith(head + "<body><p class=\"intro\" data-x='1 &amp; 2'>")
    assert out[0].endswith(tail)
    assert out[0].count("<b>") == out[0].count("</b>") == 1
    # alternatives are not given for HTML (as LibreTranslate): an empty list when asked
    r = await client.post(
        f"{LT}/translate",
        data={"q": second, "source": "fr", "target": "en", "format": "html", "alternatives": "1"},
    )
    assert r.json() == {"translatedText": f"<div>{esc[2]}</div>", "alternatives": []}


FR, DE = "Le chat dort sur le canapé.", "Der Hund schläft im Garten."


async def test_auto_detects_each_text(client: httpx.AsyncClient) -> None:
    """source "auto": detectedLanguage (confidence 0-100) per q, the translation the native "auto" gives."""
    r = await client.post(f"{LT}/translate", json={"q": FR, "source": "auto", "target": "en"})
    [expected] = await native(client, [FR], source="auto")
    lang = expected["detected_language"]
    assert lang["language"] == "fr"
    assert r.json() == {
        "translatedText": expected["translation"],
        "detectedLanguage": {"confidence": round(100 * lang["confidence"], 1), "language": "fr"},
    }
    # a list in two languages (two models), a blank text (LibreTranslate's "nothing detected"), a form
    q = [FR, DE, " "]
    r = await client.post(
        f"{LT}/translate", data={"q": q, "source": "auto", "target": "en", "alternatives": "1"}
    )
    assert r.status_code == 200, r.text
    got = r.json()
    expected = await native(client, q[:2], source="auto", num_hypotheses=2)
    assert [e["model"] for e in expected] == ["translate-fr-en", "translate-multi"]
    assert got["translatedText"] == [expected[0]["translation"], expected[1]["translation"], ""]
    assert [d["language"] for d in got["detectedLanguage"]] == ["fr", "de", "en"]
    assert got["detectedLanguage"][2] == {"confidence": 0.0, "language": "en"}
    assert got["alternatives"][:2] == [[h["translation"] for h in e["hypotheses"][1:]] for e in expected]


async def test_auto_html_detects_each_document_as_a_whole(client: httpx.AsyncClient) -> None:
    docs = [f"<p>{FR[:-1]} <b>vite</b>.</p>", f"<div>{DE}</div>", "<hr>"]
    r = await client.post(
        f"{LT}/translate", json={"q": docs, "source": "auto", "target": "en", "format": "html"}
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert [d["language"] for d in got["detectedLanguage"]] == ["fr", "de", "en"]
    assert got["detectedLanguage"][0]["confidence"] > 50
    fr = [x["translation"] for x in await native(client, [f"{FR[:-1]} vite."], source="fr")]
    [de] = [x["translation"] for x in await native(client, [DE], source="de")]
    assert got["translatedText"] == [HtmlDocument(docs[0]).render(fr), f"<div>{de}</div>", "<hr>"]


@pytest.mark.parametrize("fmt", ["text", "html"])
async def test_auto_with_a_language_no_model_serves(client: httpx.AsyncClient, fmt: str) -> None:
    q = "Questo è un libro molto interessante e bello."
    r = await client.post(
        f"{LT}/translate", json={"q": ["Le chat", q], "source": "auto", "target": "en", "format": fmt}
    )
    assert r.status_code == 400
    assert r.json()["error"].startswith("Invalid request: q[1]: detected language 'it' (confidence 0.99)")
    # no letters: nothing to detect and nothing to translate, answered as LibreTranslate (unchanged)
    r = await client.post(f"{LT}/translate", json={"q": "1 2 3", "source": "auto", "target": "en"})
    assert r.json() == {"translatedText": "1 2 3", "detectedLanguage": {"confidence": 0.0, "language": "en"}}


async def test_detect(client: httpx.AsyncClient) -> None:
    """[{"confidence" 0-100, "language"}] best first, among the languages of /languages."""
    for kw in ({"json": {"q": FR}}, {"data": {"q": FR}}):
        r = await client.post(f"{LT}/detect", **kw)  # type: ignore[arg-type]
        assert r.status_code == 200, r.text
        got = r.json()
        assert [d["language"] for d in got][0] == "fr"
        assert {d["language"] for d in got} == {"de", "en", "fr"}
        assert got == sorted(got, key=lambda d: -d["confidence"])
        assert got[0]["confidence"] > 90
        assert sum(d["confidence"] for d in got) == pytest.approx(100, abs=0.2)
    native_detect = (await client.post("/detect", json={"text": FR})).json()["results"][0]
    assert got[0] == {"confidence": round(100 * native_detect["confidence"], 1), "language": "fr"}
    # a list: confidences averaged over its texts (as LibreTranslate)
    got = (await client.post(f"{LT}/detect", json={"q": [FR, DE]})).json()
    assert [d["language"] for d in got[:2]] in (["fr", "de"], ["de", "fr"])
    assert 45 < got[0]["confidence"] < 55
    # Italian is not served: the served languages only, as LibreTranslate lists those it translates
    got = (
        await client.post(f"{LT}/detect", json={"q": "Questo è un libro molto interessante e bello."})
    ).json()
    assert {d["language"] for d in got} == {"de", "en", "fr"}
    # no letters: LibreTranslate's "nothing detected"; in a list, such a text does not count
    for q in ("2024 !", ["😀", "42"]):
        r = await client.post(f"{LT}/detect", json={"q": q})
        assert (r.status_code, r.json()) == (200, [{"confidence": 0.0, "language": "en"}])
    alone = (await client.post(f"{LT}/detect", json={"q": FR})).json()
    assert (await client.post(f"{LT}/detect", json={"q": [FR, "42"]})).json() == alone
    r = await client.post(
        f"{LT}/detect", content=b'{"q": "\\ud800 chat"}', headers={"content-type": "application/json"}
    )
    assert r.json() == {
        "error": "Invalid request: q: contains an unpaired UTF-16 surrogate (\\ud800 at character 0)"
    }
    r = await client.post(f"{LT}/detect", json={})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: missing q parameter"})


@pytest.mark.parametrize(
    ("fields", "status", "error"),
    [
        ({"source": "fr", "target": "en"}, 400, "Invalid request: missing q parameter"),
        ({"q": "", "source": "fr", "target": "en"}, 400, "Invalid request: missing q parameter"),
        ({"q": [], "source": "fr", "target": "en"}, 400, "Invalid request: missing q parameter"),
        ({"q": "chat", "target": "en"}, 400, "Invalid request: missing source parameter"),
        ({"q": "chat", "source": "fr", "target": ""}, 400, "Invalid request: missing target parameter"),
        ({"q": "chat", "source": "fr", "target": "en", "format": "pdf"}, 400, "pdf format is not supported"),
        ({"q": "chat", "source": "fr", "target": "en", "alternatives": "x"}, 400, "Invalid request: alternatives parameter is not a number"),
        ({"q": "chat", "source": "fr", "target": "en", "alternatives": 16}, 400, "Invalid request: alternatives parameter must be <= 15"),
        ({"q": 3, "source": "fr", "target": "en"}, 400, "Invalid request: q: Input should be a valid string"),
        ({"q": "chat", "source": "x", "target": "en"}, 400, "x is not supported"),
        ({"q": "chat", "source": "FR", "target": "zz"}, 400, "zz is not supported"),
        ({"q": "chat", "source": "fr", "target": "en\ud800"}, 400, "Invalid request: target: Input should be a valid string"),
        ({"q": ["chat", "\ud800"], "source": "fr", "target": "en"}, 400, "Invalid request: q[1]: contains an unpaired UTF-16 surrogate"),
        ({"q": ["chat", 3], "source": "fr", "target": "en"}, 400, "Invalid request: q[1]: Input should be a valid string"),
        ({"q": "x" * 2001, "source": "fr", "target": "en"}, 400, "Invalid request: request (2001) exceeds text limit (2000)"),
        ({"q": ["a", "x" * 2001], "source": "fr", "target": "en"}, 400, "Invalid request: request (2001) exceeds text limit (2000) (q[1])"),
        ({"q": ["a"] * 65, "source": "fr", "target": "en"}, 400, "Invalid request: request (65) exceeds text limit (64)"),
        ({"q": "hola", "source": "es", "target": "en"}, 400, "es is not supported"),
        ({"q": "chat", "source": "fr", "target": "de"}, 400, "German (de) is not available as a target language from French (fr)"),
        ({"q": ["ok", " ".join(["chat"] * 300)], "source": "fr", "target": "en"}, 400, "Invalid request: q[1]: a sentence of"),
    ],
)  # fmt: skip
async def test_translate_errors(
    client: httpx.AsyncClient, fields: dict[str, Any], status: int, error: str
) -> None:
    body = json.dumps(fields)  # ASCII: lone surrogates as escapes
    r = await client.post(f"{LT}/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert list(r.json()) == ["error"]
    assert r.json()["error"].startswith(error), r.json()


async def test_body_errors(client: httpx.AsyncClient) -> None:
    post = client.post
    for content, kind, error in [
        (b'{"q": ', "application/json", "Invalid request: the body is not JSON"),
        (b'["q"]', "application/json", "Invalid JSON format"),
        (b"q=chat", "text/plain", "Invalid request: send the fields as JSON (application/json) or as a form"),
        (
            b'--x\r\nContent-Disposition: form-data; name="q"\r\n\r\nchat\r\n',
            "multipart/form-data; boundary=x",
            "",
        ),
    ]:
        r = await post(f"{LT}/translate", content=content, headers={"content-type": kind})
        assert (r.status_code, r.json()["error"].startswith(error)) == (400, True), r.json()
    fields = {"source": "fr", "target": "en"}
    r = await post(f"{LT}/translate", data=fields, files={"q": ("q.txt", b"Le chat")})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: q is a file: send text"})
    # no body at all: the fields may come in the query string, as LibreTranslate reads them
    r = await post(f"{LT}/translate?q=Le+chat&source=fr&target=en")
    [expected] = await native(client, ["Le chat"])
    assert r.json() == {"translatedText": expected["translation"]}


async def test_api_key_in_the_body_or_the_headers(make_settings: Callable[..., Settings]) -> None:
    async with serve(make_settings(api_key="s3cret")) as (_, client):
        fields = {"q": "Le chat", "source": "fr", "target": "en"}
        for kw in ({"json": fields}, {"data": fields}):
            r = await client.post(f"{LT}/translate", **kw)  # type: ignore[arg-type]
            assert r.status_code == 403
            assert r.json() == {
                "error": "Invalid API key: this server needs one (api_key, or Authorization: Bearer <key>)"
            }
        r = await client.post(f"{LT}/translate", json=fields | {"api_key": "wrong"})
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"})
        r = await client.post(f"{LT}/translate", data=fields | {"api_key": "wrong"})
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"})
        for kw in (
            {"json": fields | {"api_key": "s3cret"}},
            {"data": fields | {"api_key": "s3cret"}},
            {"json": fields, "headers": {"Authorization": "Bearer s3cret"}},
            {"data": fields, "headers": {"X-API-Key": "s3cret"}},
        ):
            r = await client.post(f"{LT}/translate", **kw)  # type: ignore[arg-type]
            assert r.status_code == 200, r.text
            assert list(r.json()) == ["translatedText"]
        r = await client.post(f"{LT}/detect", data={"q": "Le chat dort."})
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key: this server needs one (api_key, or Authorization: Bearer <key>)"})  # fmt: skip
        r = await client.post(f"{LT}/detect", data={"q": "Le chat dort.", "api_key": "s3cret"})
        assert (r.status_code, r.json()[0]["language"]) == (200, "fr")
        # the key is checked before the fields: a bad body without the key is a 403, with it a 400
        r = await client.post(f"{LT}/translate", json={"q": ""})
        assert r.status_code == 403
        for headers in ({}, {"X-API-Key": "s3cret"}):
            kind = {"content-type": "application/json"}
            r = await client.post(f"{LT}/translate", content=b'{"q": ', headers=kind | headers)
            assert r.status_code == (400 if headers else 403)
        r = await client.post(f"{LT}/translate?api_key=s3cret", content=b'{"q": ', headers=kind)
        assert r.status_code == 400  # in the query string, as LibreTranslate reads it too
        # languages and frontend/settings are open, as in LibreTranslate; the native routes keep their 401
        assert (await client.get(f"{LT}/languages")).status_code == 200
        settings = (await client.get(f"{LT}/frontend/settings")).json()
        assert (settings["apiKeys"], settings["keyRequired"]) == (True, True)
        r = await client.post(
            "/translate", json={"text": "Le chat", "source_lang": "fr", "api_key": "s3cret"}
        )
        assert r.status_code == 401


async def test_languages_and_frontend_settings(client: httpx.AsyncClient) -> None:
    r = await client.get(f"{LT}/languages")
    assert r.json() == [
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": []},
        {"code": "fr", "name": "French", "targets": ["en"]},
    ]
    r = await client.get(f"{LT}/frontend/settings")
    assert r.json() == {
        "charLimit": 2000,
        "batchLimit": 64,
        "frontendTimeout": 500,
        "apiKeys": False,
        "keyRequired": False,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": [".txt", ".odt", ".odp", ".docx", ".pptx", ".epub", ".html", ".srt"],
        "language": {
            "source": {"code": "auto", "name": "Auto Detect"},
            "target": {"code": "en", "name": "English"},
        },
    }


async def test_suggest_is_off(client: httpx.AsyncClient) -> None:
    """As LibreTranslate with it disabled (frontend/settings: suggestions false; files: tests/app/test_files.py)."""
    r = await client.post(f"{LT}/suggest", data={"q": "chat", "s": "cat", "source": "fr", "target": "en"})
    assert (r.status_code, r.json()) == (403, {"error": "Suggestions are disabled on this server."})


async def test_queue_full_is_429_with_slowdown(
    monkeypatch: pytest.MonkeyPatch, make_settings: Callable[..., Settings]
) -> None:
    """A full queue: LibreTranslate's 429 {"error": "Slowdown: ..."}, with our Retry-After."""
    running, release = threading.Event(), threading.Event()
    original = TranslationHandler.run

    def held(handler: TranslationHandler, items: list[Any], key: Any, **kw: Any) -> Any:
        running.set()
        assert release.wait(10)
        return original(handler, items, key, **kw)

    settings = make_settings(max_queue=1, max_batch_size=1, max_batch_delay_ms=0, inference_workers=1)
    async with serve(settings) as (app, client):
        monkeypatch.setattr(TranslationHandler, "run", held)  # after the warm-up
        fields = {"q": "Le chat dort.", "source": "fr", "target": "en"}
        first = asyncio.ensure_future(client.post(f"{LT}/translate", json=fields))
        await asyncio.to_thread(running.wait, 5)  # the one worker is busy
        second = asyncio.ensure_future(client.post(f"{LT}/translate", data=fields))
        await eventually(lambda: app.state.service.queues.depth("translate-fr-en") == 1)  # the queue is full
        r = await client.post(f"{LT}/translate", json=fields)
        assert r.status_code == 429
        assert r.json()["error"].startswith("Slowdown: ")
        assert re.fullmatch(r"[1-9]\d*", r.headers["retry-after"])
        release.set()
        assert [(await f).status_code for f in (first, second)] == [200, 200]


async def test_libretranslate_and_native_requests_share_batches(
    monkeypatch: pytest.MonkeyPatch, make_settings: Callable[..., Settings]
) -> None:
    """Requests of different clients and kinds (native JSON, LibreTranslate JSON, form and HTML) that wait
    together are decoded in one batch, each answered as when alone."""
    texts = ["Le chat dort.", "Il lit un livre.", "Je mange.", "Le chien"]
    running, release = threading.Event(), threading.Event()
    batches: list[int] = []
    original = TranslationHandler.run

    def held(handler: TranslationHandler, items: list[Any], key: Any, **kw: Any) -> Any:
        batches.append(len(items))
        if [s.ids for s in items] == [handler.encode_source("Un.", ("q",))]:  # the batch to hold
            running.set()
            assert release.wait(10)
        return original(handler, items, key, **kw)

    async with serve(make_settings(inference_workers=1, max_batch_delay_ms=0)) as (app, client):
        monkeypatch.setattr(TranslationHandler, "run", held)  # after the warm-up, before the first batcher
        alone = [r["translation"] for r in await native(client, texts)]
        first = asyncio.ensure_future(native(client, ["Un."]))
        await asyncio.to_thread(running.wait, 5)
        fields = {"source": "fr", "target": "en"}
        rest = [
            asyncio.ensure_future(native(client, [texts[0]])),
            asyncio.ensure_future(client.post(f"{LT}/translate", json=fields | {"q": texts[1]})),
            asyncio.ensure_future(client.post(f"{LT}/translate", data=fields | {"q": texts[2]})),
            asyncio.ensure_future(
                client.post(f"{LT}/translate", json=fields | {"q": f"<i>{texts[3]}</i>", "format": "html"})
            ),
        ]
        await eventually(lambda: app.state.service.queues.depth("translate-fr-en") == 4)
        release.set()
        await first
        answers = await asyncio.gather(*rest)
    assert batches == [4, 1, 4]  # the texts alone, the held one, then the four waiting requests at once
    assert answers[0][0]["translation"] == alone[0]
    assert [r.json()["translatedText"] for r in answers[1:]] == [alone[1], alone[2], f"<i>{alone[3]}</i>"]


async def test_prefix_setting(make_settings: Callable[..., Settings]) -> None:
    async with serve(make_settings(libretranslate_prefix="")) as (_, client):
        assert (await client.get(f"{LT}/languages")).status_code == 404
    async with serve(make_settings(libretranslate_prefix="/lt/v1")) as (_, client):
        assert (await client.get("/lt/v1/languages")).status_code == 200
        r = await client.post("/lt/v1/translate", data={"q": "Le chat", "source": "fr", "target": "en"})
        assert r.status_code == 200
        assert 'route="/lt/v1/translate",status="200"' in (await client.get("/metrics")).text
    for bad in ("/", "lt", "/lt/", "/l t"):
        with pytest.raises(ValueError, match="libretranslate_prefix"):
            make_settings(libretranslate_prefix=bad)


async def test_native_translate_is_unchanged(client: httpx.AsyncClient) -> None:
    """The native route keeps its strict JSON contract and error shape beside the compat API."""
    r = await client.post("/translate", data={"text": "Le chat", "source_lang": "fr"})
    assert r.status_code == 422
    assert "detail" in r.json()
    r = await client.post("/translate", json={"text": "hola", "source_lang": "es"})
    assert r.status_code == 404
    assert list(r.json()) == ["detail"]
    r = await client.post("/translate", json={"text": "Le chat", "source_lang": "fr", "q": "x"})
    assert r.status_code == 422


async def test_body_limit_in_libretranslate_shape(make_settings: Callable[..., Settings]) -> None:
    """APP_MAX_BODY_BYTES: a declared length (the gate, before routing) or a chunked body (while it streams);
    a compressed body (the gate's 415)."""

    async def chunks() -> Any:
        for _ in range(3):
            yield b"q=" + b"a" * 1000

    form = {"content-type": "application/x-www-form-urlencoded"}
    async with serve(make_settings(max_body_bytes=2048)) as (_, client):
        r = await client.post(f"{LT}/translate", data={"q": "x" * 3000, "source": "fr", "target": "en"})
        assert (r.status_code, r.json()) == (413, {"error": f"request body too large: a body of {len(r.request.content)} bytes, the limit is 2048 bytes (APP_MAX_BODY_BYTES)"})  # fmt: skip
        r = await client.post(f"{LT}/translate", content=chunks(), headers=form)
        assert r.status_code == 413
        assert r.json() == {"error": "request body too large: a longer body, the limit is 2048 bytes (APP_MAX_BODY_BYTES)"}  # fmt: skip
        r = await client.post("/translate", content=b"{" * 3000, headers={"content-type": "application/json"})
        assert (r.status_code, list(r.json())) == (413, ["detail"])  # the native shape is unchanged
        r = await client.post(f"{LT}/translate", content=b"x", headers=form | {"content-encoding": "gzip"})
        assert (r.status_code, r.json()) == (415, {"error": "Content-Encoding gzip is not supported: send the body uncompressed"})  # fmt: skip


async def test_health_and_spec_under_the_prefix(client: httpx.AsyncClient) -> None:
    r = await client.get(f"{LT}/health")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})
    assert (await client.post(f"{LT}/health")).status_code == 405
    spec = (await client.get(f"{LT}/spec")).json()
    assert spec["info"]["title"] == "LibreTranslate"
    assert {f"{LT}/translate", f"{LT}/detect", f"{LT}/languages", f"{LT}/health"} <= set(spec["paths"])
    assert "/translate" not in spec["paths"]  # the compat API's document, not the native one


async def test_codes_in_any_case_and_alternatives_clamped(client: httpx.AsyncClient) -> None:
    q = "Le chat dort."
    [expected] = await native(client, [q])
    r = await client.post(
        f"{LT}/translate", json={"q": q, "source": "FR", "target": "En", "alternatives": -1}
    )
    assert (r.status_code, r.json()) == (200, {"translatedText": expected["translation"]})  # -1 is 0
    r = await client.post(
        f"{LT}/translate", data={"q": q, "source": "Fr", "target": "EN", "alternatives": "-3"}
    )
    assert r.json() == {"translatedText": expected["translation"]}


async def test_same_language_and_letterless_texts_come_back_unchanged(client: httpx.AsyncClient) -> None:
    """As LibreTranslate: fr -> fr, en -> en, emoji and numbers are answered as they came."""
    for source, target, q in (
        ("fr", "fr", "Le chat dort."),
        ("en", "en", "The cat sleeps."),
        ("fr", "en", "😀"),
    ):
        r = await client.post(f"{LT}/translate", json={"q": q, "source": source, "target": target})
        assert (r.status_code, r.json()) == (200, {"translatedText": q})
    r = await client.post(
        f"{LT}/translate", json={"q": ["😀", "12 345", "?!"], "source": "fr", "target": "en"}
    )
    assert r.json() == {"translatedText": ["😀", "12 345", "?!"]}
    # auto: the French is translated, the English (the target) comes back as it was
    q = ["Le chat dort sur le canapé.", "The cat sleeps on the sofa every day."]
    r = await client.post(f"{LT}/translate", json={"q": q, "source": "auto", "target": "en"})
    assert r.status_code == 200, r.text
    [fr] = await native(client, q[:1])
    got = r.json()
    assert got["translatedText"] == [fr["translation"], q[1]]
    assert [d["language"] for d in got["detectedLanguage"]] == ["fr", "en"]
    # and in HTML, a document in the target language
    doc = f"<p>{q[1][:-1]} <b>now</b>.</p>"
    r = await client.post(
        f"{LT}/translate", json={"q": doc, "source": "auto", "target": "en", "format": "html"}
    )
    assert (r.json()["translatedText"], r.json()["detectedLanguage"]["language"]) == (doc, "en")


async def test_cors_is_open_on_the_compat_routes_only(make_settings: Callable[..., Settings]) -> None:
    origin = {"Origin": "https://page.example"}
    async with serve(make_settings()) as (_, client):
        for r in (
            await client.get(f"{LT}/languages"),  # without an Origin too, as LibreTranslate
            await client.post(
                f"{LT}/translate", json={"q": "chat", "source": "zz", "target": "en"}, headers=origin
            ),
            await client.options(
                f"{LT}/translate", headers=origin | {"Access-Control-Request-Method": "POST"}
            ),
        ):
            assert r.status_code in (200, 400)
            assert r.headers["access-control-allow-origin"] == "*"
            assert r.headers["access-control-allow-methods"] == "GET, POST"
        r = await client.post("/translate", json={"text": "chat", "source_lang": "fr"}, headers=origin)
        assert "access-control-allow-origin" not in r.headers  # native: APP_CORS_ORIGINS (none)
    settings = make_settings(libretranslate_cors=False, cors_origins=["https://page.example"])
    async with serve(settings) as (_, client):
        r = await client.get(f"{LT}/languages", headers=origin)
        assert r.headers["access-control-allow-origin"] == "https://page.example"
        r = await client.get(f"{LT}/languages", headers={"Origin": "https://other.example"})
        assert "access-control-allow-origin" not in r.headers

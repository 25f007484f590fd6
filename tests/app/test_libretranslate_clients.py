"""LibreTranslate client libraries against a real uvicorn server (APP_API_KEY set, so the key travels as the
clients send it, in the body): from PyPI libretranslatepy (urlencoded forms through urllib, one string),
libretranslate-aio (httpx forms: lists, HTML, alternatives, frontend settings, health; multipart
translate_file, the one client of these with file translation) and deep-translator (fields in the query
string; its translate_file reads the file's text itself and calls /translate), and from npm `libretranslate`
(JSON through fetch, run by node). The tiny models translate nonsense: answers are compared with the native
/translate's."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException, ServerException
from libretranslate_aio import BadRequestError, ForbiddenError, LibreTranslate
from libretranslatepy import LibreTranslateAPI

from app.files.formats import FORMATS
from app.text.html import HtmlDocument
from bench.server import serve
from tests.app.sample_files import make_docx, make_txt

pytestmark = pytest.mark.slow  # starts python -m app: not in `make test-fast`

KEY = "s3cret"


@pytest.fixture(scope="module")
def server(app_checkpoint_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    files = str(tmp_path_factory.mktemp("files"))  # APP_FILE_DIR: translate_file's downloads
    env = {"APP_API_KEY": KEY, "APP_MAX_BATCH_DELAY_MS": "20", "APP_FILE_DIR": files}
    with serve(app_checkpoint_dir, env) as (url, _, _):
        yield url


def native(url: str, texts: list[str], **kw: Any) -> list[dict[str, Any]]:
    body = {"texts": texts, "source_lang": "fr", "target_lang": "en"} | kw
    r = httpx.post(f"{url}/translate", json=body, headers={"X-API-Key": KEY}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["results"]  # type: ignore[no-any-return]


def test_libretranslatepy(server: str) -> None:
    lt = LibreTranslateAPI(f"{server}/libretranslate", api_key=KEY)
    text = "Le chat dort. Il fait beau."
    [expected] = native(server, [text])
    assert lt.translate(text, "fr", "en", timeout=30) == expected["translation"]
    assert lt.languages(timeout=30) == [
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": []},
        {"code": "fr", "name": "French", "targets": ["en"]},
    ]
    fr, de = "Le chat dort sur le canapé.", "Der Hund schläft im Garten."
    assert (
        lt.translate(fr, "auto", "en", timeout=30)
        == native(server, [fr], source_lang="auto")[0]["translation"]
    )
    detected = lt.detect(de, timeout=30)
    assert detected[0]["language"] == "de"
    assert detected[0]["confidence"] > 90
    with pytest.raises(urllib.error.HTTPError) as e:
        LibreTranslateAPI(f"{server}/libretranslate", api_key="wrong").translate(text, "fr", "en", timeout=30)
    with e.value:  # urllib leaves the error's response open
        assert (e.value.code, e.value.read()) == (403, b'{"error":"Invalid API key"}')
    with pytest.raises(urllib.error.HTTPError) as e:
        lt.translate(text, "es", "en", timeout=30)
    with e.value:
        assert e.value.code == 400
        assert json.loads(e.value.read()) == {"error": "es is not supported"}
    # same language and no letters: back unchanged (LibreTranslate's answer)
    assert lt.translate("The cat sleeps.", "auto", "en", timeout=30) == "The cat sleeps."
    assert lt.translate("😀 12:30", "fr", "en", timeout=30) == "😀 12:30"


def test_libretranslate_aio(server: str) -> None:
    with LibreTranslate(f"{server}/libretranslate", api_key=KEY, timeout=30) as lt:
        texts = ["Le chat dort.", "Il fait beau. Je lis un livre."]
        got = lt.translate(texts, "fr", "en")
        assert got.translated_text == [r["translation"] for r in native(server, texts)]
        assert (got.detected_language, got.alternatives) == (None, None)

        got = lt.translate(texts[1], "fr", "en", alternatives=2)
        [expected] = native(server, [texts[1]], num_hypotheses=3)
        assert got.translated_text == expected["translation"]
        assert got.alternatives == [h["translation"] for h in expected["hypotheses"][1:]]

        html = '<p class="a">Le chat <b>dort</b>.</p><script>x("<p>Le chien</p>")</script>'
        got = lt.translate(html, "fr", "en", format="html")
        t = [r["translation"] for r in native(server, ["Le chat dort."])]
        assert got.translated_text == HtmlDocument(html).render(t)
        assert got.translated_text.startswith('<p class="a">')
        assert got.translated_text.endswith('</p><script>x("<p>Le chien</p>")</script>')

        fr, de = "Le chat dort sur le canapé.", "Der Hund schläft im Garten."
        got = lt.translate([fr, de], "auto", "en")
        assert got.translated_text == [r["translation"] for r in native(server, [fr, de], source_lang="auto")]
        assert isinstance(got.detected_language, list)
        assert [d.language for d in got.detected_language] == ["fr", "de"]
        assert all(d.confidence > 90 for d in got.detected_language)
        [best, *_] = lt.detect(fr)
        assert (best.language, best.confidence > 90) == ("fr", True)

        assert [(x.code, x.targets) for x in lt.languages()] == [
            ("de", ["en", "fr"]),
            ("en", []),
            ("fr", ["en"]),
        ]
        assert lt.health() is True
        got = lt.translate(["Le chat dort sur le canapé.", "The cat sleeps on the sofa."], "AUTO", "EN")
        assert got.translated_text[1] == "The cat sleeps on the sofa."
        assert [d.language for d in got.detected_language] == ["fr", "en"]
        settings = lt.frontend_settings()
        assert (settings.char_limit, settings.key_required, settings.api_keys) == (2000, True, True)
        assert (settings.language.source.code, settings.language.target.code) == ("auto", "en")

    with (
        LibreTranslate(f"{server}/libretranslate", api_key="wrong", timeout=30) as lt,
        pytest.raises(ForbiddenError, match="Invalid API key"),
    ):
        lt.translate("Le chat", "fr", "en")


def test_libretranslate_aio_translate_file(server: str, tmp_path: Path) -> None:
    """translate_file uploads a path or an open file and answers the URL of the translated file, which the
    client leaves to the caller: fetched here with the key. Its texts are translated as /translate translates
    them, its runs' styles kept."""
    path = tmp_path / "Rapport final.docx"
    path.write_bytes(make_docx())
    texts = FORMATS[".docx"].open(path.read_bytes()).texts
    by_text = dict(zip(texts, [r["translation"] for r in native(server, texts)], strict=True))
    with LibreTranslate(f"{server}/libretranslate", api_key=KEY, timeout=30) as lt:
        url = lt.translate_file(path, "fr", "en").translated_file_url
        assert re.fullmatch(
            re.escape(f"{server}/libretranslate/download_file/") + r"[\w-]{43}\.Rapport_final\.docx", url
        )
        before, after = (docx.Document(io.BytesIO(d)) for d in (path.read_bytes(), download(url)))
        for b, a in zip(before.paragraphs, after.paragraphs, strict=True):
            assert a.text == by_text.get(b.text, b.text)  # translated, or (no letters) as it was
            assert [(r.bold, r.italic, r.font.size) for r in a.runs] == [
                (r.bold, r.italic, r.font.size) for r in b.runs
            ]

        txt = tmp_path / "notes.txt"
        txt.write_bytes(make_txt())
        with txt.open("rb") as f:  # an open file: the client sends its name
            url = lt.translate_file(f, "auto", "en").translated_file_url
        assert url.endswith(".notes.txt")
        got = FORMATS[".txt"].open(download(url)).texts
        expected = [r["translation"] for r in native(server, FORMATS[".txt"].open(make_txt()).texts)]
        assert got == [" ".join(e.split()) for e in expected if e.strip()]

        with pytest.raises(BadRequestError, match="^Invalid request: file format not supported$"):
            lt.translate_file(io.BytesIO(b"MZ"), "fr", "en")  # no name: the client calls it "file"
        (broken := tmp_path / "broken.docx").write_bytes(make_docx()[:1000])
        with pytest.raises(BadRequestError, match="^Invalid request: the file is not a Word document"):
            lt.translate_file(broken, "fr", "en")
    with (
        LibreTranslate(f"{server}/libretranslate", api_key="wrong", timeout=30) as lt,
        pytest.raises(ForbiddenError, match="Invalid API key"),
    ):
        lt.translate_file(path, "fr", "en")


def download(url: str) -> bytes:
    r = httpx.get(url, headers={"X-API-Key": KEY}, timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def test_deep_translator(server: str) -> None:
    url = f"{server}/libretranslate/"
    lt = LibreTranslator(source="fr", target="en", api_key=KEY, custom_url=url)
    texts = ["Le chat dort. Il fait beau.", "Je lis un livre."]
    expected = [r["translation"] for r in native(server, texts)]
    assert lt.translate(texts[0]) == expected[0]
    assert lt.translate_batch(texts) == expected
    assert lt.translate("😀") == "😀"
    auto = LibreTranslator(source="auto", target="en", api_key=KEY, custom_url=url)
    assert auto.translate(texts[0]) == expected[0]
    assert auto.translate("The cat sleeps on the sofa.") == "The cat sleeps on the sofa."
    with pytest.raises(AuthorizationException):
        LibreTranslator(source="fr", target="en", api_key="wrong", custom_url=url).translate(texts[0])
    with pytest.raises(ServerException):  # es is not served: a 400
        LibreTranslator(source="es", target="en", api_key=KEY, custom_url=url).translate("Hola")


NPM = Path(__file__).parent / "npm"  # `npm install --prefix tests/app/npm` installs the client


def test_npm_libretranslate(server: str) -> None:
    node = shutil.which("node")
    if node is None or not (NPM / "node_modules" / "libretranslate").is_dir():
        pytest.skip("node or the npm client is missing: `npm install --prefix tests/app/npm`")
    fr, en = "Le chat dort. Il fait beau.", "The cat sleeps on the sofa."
    cases = [
        {"query": fr, "source": "fr", "target": "en"},
        {"query": fr, "target": "en"},  # the client's default source: auto
        {"query": en, "target": "en"},
        {"query": "<p>Le chat <b>dort</b>.</p>", "source": "fr", "target": "en", "format": "html"},
        {"query": fr, "source": "es", "target": "en"},  # the client refuses a language /languages lacks
    ]
    # the client sends its key as "apiKey" (LibreTranslate reads api_key): accepted too
    args = [node, str(NPM / "client_check.mjs"), f"{server}/libretranslate", KEY, json.dumps(cases)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(run.stdout)
    [expected] = native(server, [fr])
    html = httpx.post(
        f"{server}/libretranslate/translate",
        json={"q": cases[3]["query"], "source": "fr", "target": "en", "format": "html", "api_key": KEY},
    ).json()["translatedText"]
    assert got == [
        {"text": expected["translation"]},
        {"text": expected["translation"]},
        {"text": en},
        {"text": html},
        {"error": "This language was not found/does not exist."},
    ]

"""Language identification: the detector on short sentences, POST /detect, source_lang "auto" on /translate."""

from __future__ import annotations

import httpx
import pytest

from app.text.langid import FLAG_UNSERVED, Detection, LanguageDetector, restrict

pytestmark = pytest.mark.anyio
SERVED = ("de", "en", "es", "fr", "ko")  # the shipped models' languages
SHORT = {  # short everyday sentences, the hard case (Tatoeba-like)
    "en": ["I see.", "Where is the station?", "She doesn't like coffee.", "We were late again today."],
    "fr": ["Je comprends.", "Où est la gare ?", "Elle n'aime pas le café.", "Nous étions encore en retard."],
    "es": [
        "Lo entiendo.",
        "¿Dónde está la estación?",
        "No le gusta el café.",
        "Hoy llegamos tarde otra vez.",
    ],
    "de": ["Ich verstehe.", "Wo ist der Bahnhof?", "Sie mag keinen Kaffee.", "Wir waren heute wieder spät."],
    "ko": ["알겠어요.", "역이 어디예요?", "그녀는 커피를 좋아하지 않아요.", "정말 재미있는 영화였어요"],
}
UNSERVED = {  # clearly in a language no shipped model serves
    "it": "Non riesco a trovare le chiavi della macchina, le hai viste da qualche parte?",
    "ja": "今日はとても暑いので、公園へ行くのはやめましょう。",
}


@pytest.fixture(scope="module")
def detector() -> LanguageDetector:
    return LanguageDetector(SERVED)


@pytest.mark.parametrize("lang", SERVED)
def test_short_sentences_per_language(detector: LanguageDetector, lang: str) -> None:
    for text in SHORT[lang]:
        found = detector.detect(text)
        assert found[0].language == lang, (text, found[:3])
        assert {d.language for d in found} == set(SERVED)  # every served language ranked once
        assert abs(sum(d.confidence for d in found) - 1) < 1e-4
        assert [d.confidence for d in found] == sorted((d.confidence for d in found), reverse=True)


@pytest.mark.parametrize("lang", UNSERVED)
def test_a_clearly_unserved_language_comes_first(detector: LanguageDetector, lang: str) -> None:
    found = detector.detect(UNSERVED[lang])
    assert found[0].language == lang
    assert found[0].confidence >= FLAG_UNSERVED
    assert {d.language for d in found[1:]} == set(SERVED)


def test_no_letters_no_language(detector: LanguageDetector) -> None:
    assert detector.detect("12:30 !!! ...") == []


def test_restrict_renormalises_and_flags_only_a_confident_other_language() -> None:
    ranking = [("it", 0.95), ("es", 0.03), ("fr", 0.01), ("xx", 0.01)]
    assert restrict(ranking, {"es", "fr"}) == [Detection("es", 0.75), Detection("fr", 0.25)]
    assert restrict(ranking, {"es", "fr"}, flag_unserved=True)[0] == Detection("it", 0.95)
    weak = [("it", 0.6), ("es", 0.4)]
    assert restrict(weak, {"es"}, flag_unserved=True) == [Detection("es", 1.0)]


def test_detector_needs_languages_and_names_those_it_cannot_detect(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="at least one language"):
        LanguageDetector([])
    detector = LanguageDetector(["fr", "xx"])
    assert "cannot detect xx" in caplog.text
    assert [d.language for d in detector.detect("Où est la gare ?")] == ["fr"]


# --- the API (tests/app/conftest.py: translate-fr-en, translate-multi de -> en/fr, sentiment-en/-ko) -------


async def test_detect_one_and_many(client: httpx.AsyncClient) -> None:
    r = await client.post("/detect", json={"text": "Où est la gare ?"})
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert result["language"] == "fr"
    assert 0.5 < result["confidence"] <= 1
    assert "candidates" not in result
    texts = ["Wo ist der Bahnhof?", "역이 어디예요?", "Where is the station?"]
    r = await client.post("/detect", json={"texts": texts, "candidates": True})
    results = r.json()["results"]
    assert [x["language"] for x in results] == ["de", "ko", "en"]
    # the served languages of the test app: translator sources fr, de and sentiment en, ko
    assert {c["language"] for c in results[0]["candidates"]} == {"de", "en", "fr", "ko"}


async def test_detect_names_an_unserved_language_and_und_without_letters(client: httpx.AsyncClient) -> None:
    r = await client.post("/detect", json={"text": UNSERVED["it"]})
    assert r.json()["results"][0]["language"] == "it"
    # no letters (the schema takes it, as /translate does): undetermined, not a 422 for the whole list
    r = await client.post("/detect", json={"texts": ["Bonjour !", "42 ?!"], "candidates": True})
    assert r.status_code == 200, r.text
    assert r.json()["results"][1] == {"language": "und", "confidence": 0.0, "candidates": []}
    r = await client.post("/detect", json={"text": "0"})
    assert r.json() == {"results": [{"language": "und", "confidence": 0.0}]}


async def test_detect_checks_limits_and_is_in_openapi(client: httpx.AsyncClient) -> None:
    r = await client.post("/detect", json={"text": "a" * 100_000})
    assert r.status_code == 422
    assert "characters per text" in r.text
    spec = (await client.get("/openapi.json")).json()
    assert "/detect" in spec["paths"]
    assert spec["components"]["schemas"]["DetectRequest"]["examples"]
    assert spec["components"]["schemas"]["DetectResponse"]["examples"]


async def test_translate_auto_detects_and_routes_each_text(client: httpx.AsyncClient) -> None:
    texts = ["Où est la gare ?", "Wo ist der Bahnhof?", "Elle n'aime pas le café."]
    r = await client.post("/translate", json={"texts": texts, "source_lang": "auto", "max_length": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "translate-fr-en,translate-multi"
    got = [(x["model"], x["detected_language"]["language"]) for x in body["results"]]
    assert got == [("translate-fr-en", "fr"), ("translate-multi", "de"), ("translate-fr-en", "fr")]
    # the same texts with their languages given: the same translations, and no added fields
    for text, result in zip(texts, body["results"], strict=True):
        src = result["detected_language"]["language"]
        plain = await client.post("/translate", json={"text": text, "source_lang": src, "max_length": 4})
        assert plain.json()["results"] == [{"translation": result["translation"]}]


@pytest.mark.parametrize(
    ("text", "lang", "target", "served"),
    [
        (UNSERVED["it"], "it", "en", "de, fr"),
        (UNSERVED["ja"], "ja", "en", "de, fr"),
        (SHORT["en"][1], "en", "fr", "de"),  # English into en passes through (test_api.py)
    ],
)
async def test_translate_auto_422_names_the_detected_and_the_served_languages(
    client: httpx.AsyncClient, text: str, lang: str, target: str, served: str
) -> None:
    body = {"texts": ["Wo ist der Bahnhof?", text], "source_lang": "auto", "target_lang": target}
    r = await client.post("/translate", json=body)
    assert r.status_code == 422
    [error] = r.json()["detail"]
    detail = error["msg"]
    assert f"texts[1]: detected language '{lang}'" in detail
    assert f"no model translates it into {target} (served sources: {served})" in detail


async def test_translate_auto_with_a_model_checks_its_languages(client: httpx.AsyncClient) -> None:
    body = {"text": "Wo ist der Bahnhof?", "source_lang": "auto", "model": "translate-fr-en"}
    r = await client.post("/translate", json=body)
    assert r.status_code == 422
    assert "but translate-fr-en translates it into en (its source languages: fr)" in r.text


async def test_detect_many_texts_off_the_event_loop_same_answers(client: httpx.AsyncClient) -> None:
    """More than a few texts detect in a thread (Service.detect): the same answers as one at a time."""
    texts = [t for lang in ("de", "en", "fr", "ko") for t in SHORT[lang]]
    many = (await client.post("/detect", json={"texts": texts})).json()["results"]
    assert [r["language"] for r in many] == [lang for lang in ("de", "en", "fr", "ko") for _ in SHORT[lang]]
    for text, result in zip(texts[:3], many, strict=False):
        assert (await client.post("/detect", json={"text": text})).json()["results"] == [result]

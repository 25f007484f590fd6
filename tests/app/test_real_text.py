"""Real text through /translate and the LibreTranslate API on the shipped translators, both engines: items
(numbers, codes, links, emoji) taken out and put back verbatim, the rest translated as without them, and
letterless sentences and list markers inside a text passed through unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from tests.app.conftest import serve
from tests.conftest import link_checkpoints

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
PAIRS = ("translate-fr-en",)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not all((SHIPPED / p / "config.json").is_file() for p in PAIRS), reason="no shipped translators"
    ),
]


@pytest.fixture(scope="module", params=["torch", "ctranslate2"])
async def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Any]:
    if request.param == "ctranslate2":
        pytest.importorskip("ctranslate2")
    root = link_checkpoints(tmp_path_factory.mktemp("shipped"), *(SHIPPED / p for p in PAIRS))
    settings = Settings(  # eager torch decodes the traced graphs' tokens: tracing only costs start-up here
        checkpoint_dir=root, translation_engine=request.param, torchscript=False, warmup=False
    )
    async with serve(settings) as (_, c):
        yield c


async def translate(client: httpx.AsyncClient, texts: list[str], source: str = "fr", **kw: Any) -> list[str]:
    r = await client.post(
        "/translate", json={"texts": texts, "source_lang": source, "target_lang": "en"} | kw
    )
    assert r.status_code == 200, r.text
    return [x["translation"] for x in r.json()["results"]]


async def test_items_come_back_and_the_rest_is_translated_as_without_them(client: httpx.AsyncClient) -> None:
    """The issue's cases: a number the tokenizer knows ("100"), codes, an emoji: each back verbatim, and the
    words around it as the model translates the sentence without it."""
    cases = [
        ("Veuillez 100 sourire à la caméra.", "100", "Veuillez sourire à la caméra."),
        ("Je garderai cela COVID-19 à l'esprit.", "COVID-19", "Je garderai cela à l'esprit."),
        ("Le v2.3 Japon est beau.", "v2.3", "Le Japon est beau."),
        ("L'ennemi a suivi 😀 toute la nuit.", "😀", "L'ennemi a suivi toute la nuit."),
        ("Écris à jean.dupont@mail.fr demain.", "jean.dupont@mail.fr", "Écris à demain."),
    ]
    with_items = await translate(client, [c[0] for c in cases])
    without = await translate(client, [c[2] for c in cases])
    for (_, item, _), out, plain in zip(cases, with_items, without, strict=True):
        assert out.count(item) == 1, out
        assert out.replace(item, " ").split() == plain.split(), (out, plain)


async def test_replace_unknowns_false_leaves_items_to_the_model(client: httpx.AsyncClient) -> None:
    [off] = await translate(client, ["Veuillez 100 sourire à la caméra."], replace_unknowns=False)
    [on] = await translate(client, ["Veuillez 100 sourire à la caméra."])
    assert "100" in on
    assert "100" not in off  # the model drops it (issue 35)


@pytest.mark.parametrize("replace", [True, False])
async def test_letterless_sentences_and_list_markers_pass_through(
    client: httpx.AsyncClient, replace: bool
) -> None:
    """Inside a text, a letterless sentence ("7", "15 €.") and a numbered list's markers come back as they
    came, with either setting; a marker opening a sentence ("2)", "•") too when items are put back."""
    texts = ["Il fait beau. 7", "1. Ouvrez la porte. 2. Fermez la fenêtre.", "Merci. 15 €."]
    out = await translate(client, texts, replace_unknowns=replace)
    assert out[0].endswith(". 7")
    assert out[1].startswith("1. ")
    assert " 2. " in out[1]
    assert ".." not in out[1]
    assert out[2].endswith(" 15 €.")
    if replace:
        [marked] = await translate(client, ["2) Ouvrez la porte. • Fermez la fenêtre."])
        assert marked.startswith("2) ")
        assert " • " in marked


async def test_libretranslate_passes_markers_and_letterless_sentences_alike(
    client: httpx.AsyncClient,
) -> None:
    q = ["Il fait beau. 7", "1. Ouvrez la porte. 2. Fermez la fenêtre."]
    r = await client.post("/libretranslate/translate", json={"q": q, "source": "fr", "target": "en"})
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == await translate(client, q)


async def test_a_sentence_of_items_only_passes_through(client: httpx.AsyncClient) -> None:
    """No letter outside its items ("COVID-19", "v2.3 → v2.4"): nothing to translate."""
    texts = ["COVID-19", "v2.3 → v2.4", "@tom #vacances"]
    assert await translate(client, texts) == texts

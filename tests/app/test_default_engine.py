"""The default engine (APP_TRANSLATION_ENGINE=auto: CTranslate2 on a CPU in float32) translates the shipped
checkpoints as the torch engine does, through HTTP: the same translations, scores within 1e-4 (excused only
where torch's own choice was within tests/margins.py's MARGIN of a tie), greedy and beam 4."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from tests.app.conftest import serve
from tests.conftest import link_checkpoints
from tests.margins import assert_same_answer
from training.data import resolve_data_dir

pytest.importorskip("ctranslate2")
SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
TRANSLATORS = {"fr": "translate-fr-en", "es": "translate-es-en", "de": "translate-de-en"}
FROM_SPLIT = 16  # the first sentences of each test split, where ../shared/data has it
SPLITS = {
    "fr": ("tatoeba/fra-eng/test.tsv", 1),
    "es": ("tatoeba/spa-eng/test.tsv", 1),
    "de": ("multi30k/test.de", 0),
}
SENTENCES = {  # besides the test split: the domain, and text unlike it (numbers, names, news)
    "fr": [
        "Où est la gare ?",
        "Le billet coûte 15 € et le train part à 19:30.",
        "La version v2.3 corrige le bug signalé sur https://example.com 😀",
        "Le gouvernement a annoncé de nouvelles mesures économiques hier soir.",
    ],
    "es": ["¿Dónde está la estación?", "Muchas gracias por tu ayuda.", "El tren sale a las 8 de la mañana."],
    "de": ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch im Park."],
}
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not all((SHIPPED / n / "config.json").is_file() for n in TRANSLATORS.values()),
        reason="no shipped translators in checkpoints/",
    ),
]


def sentences(lang: str) -> list[str]:
    """SENTENCES[lang], and the first FROM_SPLIT of its test split when the data is there."""
    rel, column = SPLITS[lang]
    path = resolve_data_dir(None) / rel
    if not path.is_file():
        return SENTENCES[lang]
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".tsv":
        lines = [line.split("\t")[column] for line in lines[1:]]
    return SENTENCES[lang] + lines[:FROM_SPLIT]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return link_checkpoints(tmp_path_factory.mktemp("shipped"), *(SHIPPED / n for n in TRANSLATORS.values()))


@pytest.fixture(scope="module")
async def torch_client(shipped: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(Settings(checkpoint_dir=shipped, translation_engine="torch", warmup=False)) as (_, c):
        yield c


@pytest.fixture(scope="module")
async def default_client(shipped: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(Settings(checkpoint_dir=shipped, warmup=False)) as (_, c):
        yield c


async def test_the_default_engine_is_ctranslate2_on_cpu(
    default_client: httpx.AsyncClient, torch_client: httpx.AsyncClient
) -> None:
    for client, engine in ((default_client, "ctranslate2"), (torch_client, "torch")):
        r = await client.get("/models")
        assert r.status_code == 200, r.text
        engines = {m["name"]: m["engine"] for m in r.json()["models"]}
        assert engines == dict.fromkeys(TRANSLATORS.values(), engine)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("lang", sorted(TRANSLATORS))
async def test_the_default_engine_translates_the_shipped_models_as_torch(
    default_client: httpx.AsyncClient, torch_client: httpx.AsyncClient, lang: str, beam: int
) -> None:
    body: dict[str, Any] = {"texts": sentences(lang), "source_lang": lang, "target_lang": "en"}
    body |= {"beam_size": beam, "return_scores": True}
    want = await torch_client.post("/translate", json=body)
    got = await default_client.post("/translate", json=body)
    assert want.status_code == got.status_code == 200, (want.text, got.text)
    await assert_same_answer(got.json(), want.json(), torch_client, body)

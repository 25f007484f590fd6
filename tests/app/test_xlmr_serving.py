"""An imported XLM-R classifier served by /sentiment (batched, routed by language like ours) and /attention,
answering as transformers' XLMRobertaForSequenceClassification does (tests/model/test_xlmr.py: the import)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import torch
from fastapi import FastAPI

from app.core.settings import Settings
from tests.app.conftest import serve
from training import imports

pytest.importorskip("transformers")

pytestmark = pytest.mark.anyio
TEXTS = [
    "Le chat aime la maison.",
    "The dog sees a book!",
    "Un chien voit un livre encore !",
    "a b c",
    "Zébulon ?",
]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_xlmr import build_xlmr

    return build_xlmr(tmp_path_factory.mktemp("hf") / "xlm-roberta-sentiment", seed=1)


@pytest.fixture(scope="module")
async def server(
    hf_dir: Path, tmp_path_factory: pytest.TempPathFactory, tiny_sentiment_ko_checkpoint: Path
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    root = tmp_path_factory.mktemp("xlmr-serving")
    argv = [
        "xlm-roberta",
        str(hf_dir),
        "--name",
        "sentiment-xlmr",
        "--out-dir",
        str(root),
        "--lang",
        "en",
        "fr",
    ]
    assert imports.cli(argv) == 0
    (root / "sentiment-ko").symlink_to(tiny_sentiment_ko_checkpoint, target_is_directory=True)
    async with serve(Settings(checkpoint_dir=root)) as pair:
        yield pair


@pytest.fixture(scope="module")
def reference(hf_dir: Path):  # noqa: ANN201
    from tests.tiny_xlmr import load_reference

    return load_reference(hf_dir)


def probabilities(reference, texts: list[str]) -> torch.Tensor:  # noqa: ANN001
    model, tok = reference
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        return model(**enc).logits.softmax(-1)  # type: ignore[no-any-return]


async def test_sentiment_equals_transformers(server: tuple[FastAPI, httpx.AsyncClient], reference) -> None:  # noqa: ANN001
    """One request per text, all at once (batched by the server), routed to it by language (no "model")."""
    client = server[1]
    replies = await asyncio.gather(*(client.post("/sentiment", json={"text": t}) for t in TEXTS))
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    results = [r.json()["results"][0] for r in replies]
    assert {r["model"] for r in results} == {"sentiment-xlmr"}
    want = probabilities(reference, TEXTS)
    labels = reference[0].config.id2label
    for result, row in zip(results, want.tolist(), strict=True):
        assert list(result["probabilities"]) == ["negative", "neutral", "positive"]
        assert list(result["probabilities"].values()) == pytest.approx(row, abs=1e-4)
        assert result["label"] == labels[max(range(3), key=row.__getitem__)]
    r = await client.post("/sentiment", json={"text": "정말 좋았어요"})  # Korean: our sentiment-ko
    assert r.json()["results"][0]["model"] == "sentiment-ko"


async def test_attention_on_the_imported_classifier(
    server: tuple[FastAPI, httpx.AsyncClient], reference
) -> None:  # noqa: ANN001
    tok = reference[1]
    r = await server[1].post("/attention", json={"model": "sentiment-xlmr", "text": TEXTS[0]})
    assert r.status_code == 200, r.text
    assert r.json()["source_tokens"] == tok.convert_ids_to_tokens(tok(TEXTS[0])["input_ids"])


async def test_models_lists_it(server: tuple[FastAPI, httpx.AsyncClient]) -> None:
    models = {m["name"]: m for m in (await server[1].get("/models")).json()["models"]}
    m = models["sentiment-xlmr"]
    assert (m["origin"], m["task"], m["labels"], m["source_langs"], m["status"]) == (
        "xlm-roberta", "sentiment", ["negative", "neutral", "positive"], ["en", "fr"], "ready",
    )  # fmt: skip

"""APP_QUANTIZE=int8: the server answers as the int8 model does in-process; where it cannot run, start-up fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from asgi_lifespan import LifespanManager

from app.core.settings import Settings, SettingsError
from app.main import create_app
from model import DecodeOptions, Translator, load_checkpoint
from model.inference import classify_texts, translate_texts
from model.jit import trace_translator
from tests.app.conftest import serve

pytestmark = pytest.mark.anyio
FR = ["Le chat aime la maison.", "Un chien voit un livre !"]
EN = ["a great film", "dull and far too long"]


@pytest.mark.parametrize("beam_size", [1, 3])
async def test_int8_server_answers_as_the_int8_model(
    make_settings: Callable[..., Settings], app_checkpoint_dir: Path, beam_size: int
) -> None:
    translator = load_checkpoint(app_checkpoint_dir / "translate-fr-en", quantize="int8")
    assert isinstance(translator.model, Translator)
    opts = DecodeOptions(beam_size=beam_size)
    expected = translate_texts(trace_translator(translator.model), translator.tokenizer, FR, opts)
    classifier = load_checkpoint(app_checkpoint_dir / "sentiment-en", quantize="int8")
    probs = classify_texts(classifier.model, classifier.tokenizer, EN)  # type: ignore[arg-type]
    async with serve(make_settings(quantize="int8")) as (_, client):
        r = await client.post(
            "/translate",
            json={"texts": FR, "source_lang": "fr", "beam_size": beam_size, "return_scores": True},
        )
        assert r.status_code == 200, r.text
        got = [(x["translation"], x["score"]) for x in r.json()["results"]]
        assert [t for t, _ in got] == [hyps[0][0] for hyps in expected]
        assert [s for _, s in got] == pytest.approx([hyps[0][1] for hyps in expected], abs=1e-4)
        r = await client.post("/sentiment", json={"texts": EN, "model": "sentiment-en"})
        assert r.status_code == 200, r.text
        for result, row in zip(r.json()["results"], probs.tolist(), strict=True):
            assert list(result["probabilities"].values()) == pytest.approx(row, abs=1e-5)


async def test_int8_needs_float32(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(quantize="int8", dtype="bfloat16"))
    with pytest.raises(SettingsError, match="APP_QUANTIZE=int8 runs on a CPU in float32"):
        async with LifespanManager(app):
            pass


def test_unknown_quantize_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="quantize"):
        Settings(quantize="int4")  # type: ignore[arg-type]

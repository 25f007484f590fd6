"""Every endpoint in-process (httpx ASGITransport, lifespan running) against the tiny checkpoints."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from app.core.settings import Settings
from app.registry import fingerprint
from app.tasks import attention_maps
from model import DecodeOptions, LoadedModel, Translator, load_checkpoint, save_checkpoint
from model.inference import classify_texts, translate_ids
from model.preprocess import classifier_ids, source_ids, target_ids
from tests.app.conftest import MULTI_LANG_IDS, serve
from tests.conftest import make_corpus, tiny_translation_config

pytestmark = pytest.mark.anyio
FR = ["Le chat aime la maison.", "Un chien voit un livre !", "Elle lit encore"]


@pytest.fixture(scope="module")
def models(app_checkpoint_dir: Path) -> dict[str, LoadedModel]:
    """The same checkpoints loaded independently, for direct model.inference references."""
    return {p.name: load_checkpoint(p) for p in sorted(app_checkpoint_dir.iterdir())}


def direct_probs(m: LoadedModel, texts: list[str]) -> torch.Tensor:
    return classify_texts(m.model, m.tokenizer, texts)  # type: ignore[arg-type]


def direct_translate(m: LoadedModel, texts: list[str], opts: DecodeOptions, lang: str = "en") -> list[Any]:
    seqs = [source_ids(m.tokenizer, t, m.config) for t in texts]
    return translate_ids(m.model, seqs, opts, lang)  # type: ignore[arg-type]


# --- system ----------------------------------------------------------------------------------------------


async def test_health_and_ready(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).json() == {"status": "ok"}
    r = await client.get("/ready")
    assert r.status_code == 200
    assert r.json()["status"] == "ready"
    assert set(r.json()["models"].values()) == {"ready"}


async def test_models_lists_everything_served(client: httpx.AsyncClient, app_checkpoint_dir: Path) -> None:
    body = (await client.get("/models")).json()
    by_name = {m["name"]: m for m in body["models"]}
    assert sorted(by_name) == ["sentiment-en", "sentiment-ko", "translate-fr-en", "translate-multi"]
    en = by_name["sentiment-en"]
    weights = (app_checkpoint_dir / "sentiment-en" / "model.safetensors").read_bytes()
    assert en["sha256"] == hashlib.sha256(weights).hexdigest()
    assert en["version"] == fingerprint(app_checkpoint_dir / "sentiment-en")
    assert en | {"parameters": None, "sha256": None, "version": None} == {
        "name": "sentiment-en", "task": "sentiment", "status": "ready", "source_langs": ["en"],
        "target_langs": [], "labels": ["negative", "positive"], "parameters": None, "dtype": "float32",
        "device": "cpu", "max_len": 512, "sha256": None, "metrics": {"accuracy": 0.5}, "model_card": False,
        "domain": None, "limits": [],
        "origin": "trained", "engine": "torch", "reason": None, "graphs": "ready", "version": None,
        "revision": None,
    }  # fmt: skip
    assert en["parameters"] > 0
    assert by_name["translate-multi"]["target_langs"] == ["en", "fr"]
    assert by_name["translate-fr-en"]["metrics"] == {"bleu": 0.0}


async def test_models_shows_a_translators_domain_and_limits(
    tmp_path: Path, tiny_translator_checkpoint: Path
) -> None:
    """config.json's "card" (training/ship.py writes it from the recipe) is the /models entry's."""
    ckpt = tmp_path / "translate-fr-en"
    shutil.copytree(tiny_translator_checkpoint, ckpt)
    meta = json.loads((ckpt / "config.json").read_text())
    card = {
        "domain": "Tatoeba's short everyday sentences.",
        "limits": [{"kind": "news text", "source": "Le gouvernement.", "output": "The resident."}],
    }
    (ckpt / "config.json").write_text(json.dumps(meta | {"card": card}))
    async with serve(Settings(checkpoint_dir=tmp_path, warmup=False)) as (_, client):
        [entry] = (await client.get("/models")).json()["models"]
    assert (entry["domain"], entry["limits"]) == (card["domain"], card["limits"])


async def test_metrics_is_prometheus_text(client: httpx.AsyncClient) -> None:
    await client.post("/sentiment", json={"text": "a dog"})
    r = await client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    for name in (
        'transformer_serving_http_requests_total{method="POST",route="/sentiment",status="200"}',
        "transformer_serving_http_request_duration_seconds_bucket",
        'transformer_serving_batch_size_bucket{le="1.0",model="sentiment-en"}',
        'transformer_serving_inference_duration_seconds_count{model="sentiment-en"}',
        'transformer_serving_queue_depth{model="sentiment-en"}',
        'transformer_serving_queue_depth{model="translate-fr-en"}',
        "transformer_serving_models_loaded 4.0",
    ):
        assert name in r.text


async def test_metrics_label_routes_by_template_and_everything_else_unmatched(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/docs", "/openapi.json", "/no-such-1", "/no-such-2"):
        await client.get(path)
    metrics = (await client.get("/metrics")).text
    for route in ("/docs", "/openapi.json", "unmatched"):
        assert f'transformer_serving_http_requests_total{{method="GET",route="{route}",status=' in metrics, (
            route
        )
    assert "no-such" not in metrics  # raw paths never become labels


async def test_openapi_has_an_example_for_every_request(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for name in ("SentimentRequest", "TranslateRequest", "AttentionRequest"):
        assert schemas[name]["examples"], name
    for name in ("SentimentResponse", "TranslateResponse", "Readiness"):
        assert schemas[name]["examples"], name
    assert {"/sentiment", "/translate", "/attention", "/health", "/ready", "/models", "/metrics"} <= set(
        spec["paths"]
    )
    assert (await client.get("/docs")).status_code == 200


# --- /sentiment ------------------------------------------------------------------------------------------


async def test_sentiment_one_text(client: httpx.AsyncClient, models: dict[str, LoadedModel]) -> None:
    body = (await client.post("/sentiment", json={"text": "this movie is good"})).json()
    [result] = body["results"]
    probs = direct_probs(models["sentiment-en"], ["this movie is good"])[0].tolist()
    assert body["model"] == result["model"] == "sentiment-en"
    assert list(result["probabilities"]) == ["negative", "positive"]
    assert list(result["probabilities"].values()) == pytest.approx(probs, abs=1e-6)
    assert result["label"] == ["negative", "positive"][int(torch.tensor(probs).argmax())]
    assert result["score"] == max(result["probabilities"].values())


async def test_sentiment_routes_each_text_by_language_in_order(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    texts = ["a dog", "이 영화 정말 좋았어요", "the story", "결말 별로였다 ㅋㅋ"]
    body = (await client.post("/sentiment", json={"texts": texts})).json()
    assert [r["model"] for r in body["results"]] == [
        "sentiment-en",
        "sentiment-ko",
        "sentiment-en",
        "sentiment-ko",
    ]
    assert body["model"] == "sentiment-en,sentiment-ko"
    for text, result in zip(texts, body["results"], strict=True):
        expected = direct_probs(models[result["model"]], [text])[0].tolist()
        assert list(result["probabilities"].values()) == pytest.approx(expected, abs=1e-5)


async def test_sentiment_explicit_model_overrides_language(client: httpx.AsyncClient) -> None:
    body = (
        await client.post("/sentiment", json={"texts": ["정말 좋았어요"], "model": "sentiment-en"})
    ).json()
    assert body["results"][0]["model"] == "sentiment-en"


@pytest.mark.parametrize("model", ["nope", "translate-fr-en"])
async def test_sentiment_unknown_model_is_404_listing_loaded_models(
    client: httpx.AsyncClient, model: str
) -> None:
    r = await client.post("/sentiment", json={"text": "a", "model": model})
    assert r.status_code == 404
    assert "sentiment-en, sentiment-ko" in r.json()["detail"]


# --- /translate ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("beam_size", [1, 4])
async def test_translate_matches_direct_inference(
    client: httpx.AsyncClient, models: dict[str, LoadedModel], beam_size: int
) -> None:
    body = (
        await client.post(
            "/translate",
            json={"texts": FR, "source_lang": "fr", "beam_size": beam_size, "return_scores": True},
        )
    ).json()
    assert body["model"] == "translate-fr-en"
    m = models["translate-fr-en"]
    for result, [hyp] in zip(
        body["results"], direct_translate(m, FR, DecodeOptions(beam_size=beam_size)), strict=True
    ):
        assert result["translation"] == m.tokenizer.decode(hyp.tokens)
        assert result["score"] == pytest.approx(hyp.score, abs=1e-4)
        assert "hypotheses" not in result


async def test_translate_splits_sentences_and_keeps_newlines(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    text = "Le chat aime la maison. Un chien voit un livre !\n\nElle lit encore"
    [result] = (
        await client.post("/translate", json={"text": text, "source_lang": "fr", "beam_size": 2})
    ).json()["results"]
    m = models["translate-fr-en"]
    s = [m.tokenizer.decode(h[0].tokens) for h in direct_translate(m, FR, DecodeOptions(beam_size=2))]
    assert result["translation"] == f"{s[0]} {s[1]}\n\n{s[2]}"


async def test_translate_n_best(client: httpx.AsyncClient) -> None:
    req = {"text": FR[0], "source_lang": "fr", "beam_size": 4, "num_hypotheses": 3}
    [result] = (await client.post("/translate", json=req)).json()["results"]
    hyps = result["hypotheses"]
    assert len(hyps) == 3
    assert [h["score"] for h in hyps] == sorted((h["score"] for h in hyps), reverse=True)
    assert hyps[0]["translation"] == result["translation"]
    assert len({h["translation"] for h in hyps}) == 3  # distinct
    assert "score" not in result  # return_scores is off


async def test_translate_n_best_is_distinct_when_the_beam_ends_with_fewer(client: httpx.AsyncClient) -> None:
    # max_length 1: EOS is forced at the first step, so one (empty) hypothesis exists, not 3 copies of it
    req = {"texts": [FR[0], "Le chat. Il dort."], "source_lang": "fr", "beam_size": 4, "num_hypotheses": 3}
    for result in (await client.post("/translate", json=req | {"max_length": 1})).json()["results"]:
        assert [h["translation"] for h in result["hypotheses"]] == [result["translation"]]


async def test_translate_max_length_caps_generated_tokens(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    req = {"text": FR[0], "source_lang": "fr", "beam_size": 1, "max_length": 3}
    [result] = (await client.post("/translate", json=req)).json()["results"]
    m = models["translate-fr-en"]
    [[hyp]] = direct_translate(m, [FR[0]], DecodeOptions(beam_size=1, max_length=3, max_length_ratio=0.0))
    assert len(hyp.tokens) <= 2  # 3 generated tokens, EOS included
    assert result["translation"] == m.tokenizer.decode(hyp.tokens)


async def test_translate_multilingual_model_starts_with_the_target_token(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    text = "Der Hund sieht ein Buch"
    for lang in ("en", "fr"):
        body = (
            await client.post("/translate", json={"text": text, "source_lang": "de", "target_lang": lang})
        ).json()
        assert body["model"] == "translate-multi"
        [[hyp]] = direct_translate(models["translate-multi"], [text], DecodeOptions(), lang)
        assert body["results"][0]["translation"] == models["translate-multi"].tokenizer.decode(hyp.tokens)


async def test_translate_unknown_pair_is_404_naming_the_pairs(client: httpx.AsyncClient) -> None:
    r = await client.post("/translate", json={"text": "hola", "source_lang": "es"})
    assert r.status_code == 404
    assert "es -> en" in r.json()["detail"]
    assert "de-en, de-fr, fr-en" in r.json()["detail"]


async def test_translate_explicit_model_must_cover_the_pair(client: httpx.AsyncClient) -> None:
    req = {"text": "Hallo", "source_lang": "de", "target_lang": "fr"}
    assert (await client.post("/translate", json=req | {"model": "translate-multi"})).json()[
        "model"
    ] == "translate-multi"
    r = await client.post("/translate", json=req | {"model": "translate-fr-en"})
    assert r.status_code == 404
    assert "translate-fr-en translates fr -> en, not de -> fr" in r.json()["detail"]


async def batches(client: httpx.AsyncClient) -> float:
    """Batches run by every translator so far (the batch_size histograms' counts in /metrics)."""
    text = (await client.get("/metrics")).text
    counts = re.findall(
        r'^transformer_serving_batch_size_count\{model="translate-[^"]*"\} (\S+)$', text, re.M
    )
    return sum(float(c) for c in counts)


LETTERLESS = ["12345", "😀", "!!! 3,14 % — 19:30 €", "👍🏽 🇫🇷"]


@pytest.mark.parametrize("source", ["fr", "auto"])
async def test_translate_passes_letterless_text_through_without_a_model_call(
    client: httpx.AsyncClient, source: str
) -> None:
    before = await batches(client)
    for fields in ({"texts": LETTERLESS}, {"text": LETTERLESS[1]}):
        r = await client.post("/translate", json=fields | {"source_lang": source, "return_scores": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == "passthrough"
        expected = fields.get("texts", [fields.get("text")])
        assert body["results"] == [{"translation": t, "score": 0.0, "model": "passthrough"} for t in expected]
    assert await batches(client) == before  # no model ran


async def test_translate_passes_same_language_through(client: httpx.AsyncClient) -> None:
    before = await batches(client)
    for lang, text in (("fr", "Le chat dort."), ("en", "The cat sleeps."), ("de", "Der Hund.")):
        req = {"texts": [text, "42"], "source_lang": lang, "target_lang": lang, "num_hypotheses": 2}
        r = await client.post("/translate", json=req | {"beam_size": 2})
        assert r.status_code == 200, r.text
        assert r.json() == {
            "model": "passthrough",
            "results": [
                {"translation": t, "hypotheses": [{"translation": t, "score": 0.0}], "model": "passthrough"}
                for t in (text, "42")
            ],
        }
    assert await batches(client) == before
    r = await client.post("/translate", json={"text": "hola", "source_lang": "es", "target_lang": "es"})
    assert r.status_code == 404  # a language no model serves stays an error
    assert "no model translates es -> es" in r.json()["detail"]


async def test_translate_auto_mixes_translated_and_passed_through_texts(client: httpx.AsyncClient) -> None:
    fr, en = "Le chat dort sur le canapé.", "The cat sleeps on the sofa every day."
    r = await client.post("/translate", json={"texts": [fr, en, "2024"], "source_lang": "auto"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "translate-fr-en,passthrough"
    [translated, same, number] = body["results"]
    [expected] = (await client.post("/translate", json={"texts": [fr], "source_lang": "fr"})).json()[
        "results"
    ]
    assert (translated["translation"], translated["model"]) == (expected["translation"], "translate-fr-en")
    assert translated["detected_language"]["language"] == "fr"
    assert (same["translation"], same["model"], same["detected_language"]["language"]) == (
        en,
        "passthrough",
        "en",
    )
    assert number == {"translation": "2024", "model": "passthrough"}  # nothing detected in it


async def test_translate_sentence_over_max_len_is_422_naming_the_limit(client: httpx.AsyncClient) -> None:
    text = "a b c " * 200  # one sentence of 1200 characters, > 512 tokens
    r = await client.post("/translate", json={"texts": ["ok.", text], "source_lang": "fr"})
    assert r.status_code == 422
    [err] = r.json()["detail"]
    assert err["loc"] == ["body", "texts", 1]
    assert "512-token limit of translate-fr-en" in err["msg"]


async def test_translate_puts_back_numbers_and_symbols_unless_asked_not_to(client: httpx.AsyncClient) -> None:
    """The tiny tokenizer has no digits, symbols or emoji: each item below is one <unk> of its source. On
    (the default) each comes back exactly, whatever the random model wrote; off: the raw output."""
    texts = ["le chat aime 12 livres.", "un chien voit 15 € et 😀 aujourd'hui.", "mon ami lit à 19:30"]
    on = await client.post("/translate", json={"texts": texts, "source_lang": "fr"})
    off = await client.post(
        "/translate", json={"texts": texts, "source_lang": "fr", "replace_unknowns": False}
    )
    assert on.status_code == off.status_code == 200, (on.text, off.text)
    for items, r_on, r_off in zip(
        [["12"], ["15 €", "😀"], ["19:30"]], on.json()["results"], off.json()["results"], strict=True
    ):
        assert all(i in r_on["translation"] for i in items), r_on
        assert not any(i in r_off["translation"] for i in items), r_off
        assert "\u2047" not in r_on["translation"]


async def test_translate_without_unknowns_is_the_same_either_way(client: httpx.AsyncClient) -> None:
    """Parity: sentences whose source and output hold no <unk> translate exactly as with replacement off."""
    texts = make_corpus(20)[::3][:14] + FR
    on = (await client.post("/translate", json={"texts": texts, "source_lang": "fr", "beam_size": 2})).json()
    off = (
        await client.post(
            "/translate",
            json={"texts": texts, "source_lang": "fr", "beam_size": 2, "replace_unknowns": False},
        )
    ).json()
    pairs = [(a["translation"], b["translation"]) for a, b in zip(on["results"], off["results"], strict=True)]
    clean = [(a, b) for a, b in pairs if "\u2047" not in b]
    assert len(clean) >= len(texts) // 2
    assert all(a == b for a, b in clean)


async def test_replace_unknowns_is_a_documented_boolean(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    field = spec["components"]["schemas"]["TranslateRequest"]["properties"]["replace_unknowns"]
    assert field["type"] == "boolean"
    assert field["default"] is True
    assert "<unk>" in field["description"]
    r = await client.post(
        "/translate", json={"text": "le chat", "source_lang": "fr", "replace_unknowns": "no"}
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "replace_unknowns"]


# --- /attention ------------------------------------------------------------------------------------------


def shape(x: Any) -> list[int]:
    out = []
    while isinstance(x, list):
        out.append(len(x))
        x = x[0]
    return out


async def test_attention_sentiment(client: httpx.AsyncClient, models: dict[str, LoadedModel]) -> None:
    m = models["sentiment-en"]
    body = (
        await client.post("/attention", json={"model": "sentiment-en", "text": "the cat likes music"})
    ).json()
    ids = classifier_ids(m.tokenizer, "the cat likes music", m.config)
    assert body["source_tokens"] == m.tokenizer.pieces(ids)
    assert body["source_tokens"][-1] == "</s>"
    assert shape(body["encoder_self_attention"]) == [2, 2, len(ids), len(ids)]
    maps = torch.tensor(body["encoder_self_attention"], dtype=torch.float32)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, len(ids)), atol=1e-3, rtol=0)
    with torch.inference_mode():
        _, _, weights = m.model.encode(torch.tensor([ids]), need_weights=True)
    torch.testing.assert_close(maps[1], weights[1][0], atol=1e-4, rtol=0)
    assert "cross_attention" not in body


async def test_attention_subsets_layers_and_heads(client: httpx.AsyncClient) -> None:
    req = {"model": "sentiment-en", "text": "a dog", "layers": [1], "heads": [1]}
    body = (await client.post("/attention", json=req)).json()
    assert (body["layers"], body["heads"]) == ([1], [1])
    assert shape(body["encoder_self_attention"])[:2] == [1, 1]


@pytest.mark.parametrize(
    ("field", "value", "message"), [("layers", [2], "layer 2"), ("heads", [0, 5], "head 5")]
)
async def test_attention_out_of_range_is_422_naming_the_range(
    client: httpx.AsyncClient, field: str, value: list[int], message: str
) -> None:
    r = await client.post("/attention", json={"model": "sentiment-en", "text": "a", field: value})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"].startswith(f"{field}: ")
    assert f"{message} is out of range: valid range is 0..1" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize(("field", "value"), [("layers", [0, 1, 0]), ("heads", [1, 1])])
async def test_attention_lists_each_layer_and_head_once(
    client: httpx.AsyncClient, field: str, value: list[int]
) -> None:
    r = await client.post("/attention", json={"model": "sentiment-en", "text": "a", field: value})
    assert r.status_code == 422
    msg = f"{field}: lists {value[-1]} more than once: give each {field[:-1]} at most once"
    assert r.json()["detail"][0]["msg"] == msg


async def test_attention_maps_are_bounded_in_size(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = {"model": "sentiment-en", "text": "the cat likes music and the dog"}
    one = await client.post("/attention", json=req | {"layers": [0], "heads": [1]})
    n = len(one.json()["source_tokens"])
    # one map fits, not 2 layers x 2 heads
    monkeypatch.setattr(attention_maps, "MAX_ATTENTION_WEIGHTS", n * n)
    assert (await client.post("/attention", json=req | {"layers": [0], "heads": [1]})).status_code == 200
    r = await client.post("/attention", json=req)
    assert r.status_code == 422
    assert f"the selected maps hold {4 * n * n:,} attention weights, more than {n * n:,}: select" in r.text


async def test_attention_translator_with_target(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    m = models["translate-fr-en"]
    req = {"model": "translate-fr-en", "text": "Le chat dort", "target": "The cat sleeps"}
    body = (await client.post("/attention", json=req)).json()
    src = source_ids(m.tokenizer, "Le chat dort", m.config)
    tgt = target_ids(m.tokenizer, "The cat sleeps", m.config)[:-1]
    assert body["source_tokens"] == m.tokenizer.pieces(src)
    assert body["target_tokens"] == m.tokenizer.pieces(tgt)
    assert body["target_tokens"][0] == "<s>"
    assert shape(body["cross_attention"]) == [2, 2, len(tgt), len(src)]
    assert shape(body["decoder_self_attention"]) == [2, 2, len(tgt), len(tgt)]
    assert "translation" not in body


async def test_attention_translator_uses_the_greedy_translation(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    body = (
        await client.post(
            "/attention", json={"model": "translate-multi", "text": "Hallo", "target_lang": "fr"}
        )
    ).json()
    m = models["translate-multi"]
    [[hyp]] = direct_translate(m, ["Hallo"], DecodeOptions(beam_size=1), "fr")
    assert body["translation"] == m.tokenizer.decode(hyp.tokens)
    assert body["target_tokens"] == m.tokenizer.pieces([MULTI_LANG_IDS["fr"], *hyp.tokens])


async def test_attention_covers_stacks_of_different_depths(
    client: httpx.AsyncClient, models: dict[str, LoadedModel]
) -> None:
    m = models["translate-multi"]  # 3 encoder layers, 2 decoder layers
    req = {"model": "translate-multi", "text": "Hallo Welt", "target": "hello", "target_lang": "en"}
    body = (await client.post("/attention", json=req)).json()
    assert (body["layers"], body["decoder_layers"]) == ([0, 1, 2], [0, 1])
    src = source_ids(m.tokenizer, "Hallo Welt", m.config)
    tgt = target_ids(m.tokenizer, "hello", m.config, "en")[:-1]
    assert shape(body["encoder_self_attention"]) == [3, 2, len(src), len(src)]
    assert shape(body["decoder_self_attention"]) == [2, 2, len(tgt), len(tgt)]
    assert shape(body["cross_attention"]) == [2, 2, len(tgt), len(src)]
    last = (await client.post("/attention", json=req | {"layers": [2]})).json()  # the encoder's only
    assert (last["layers"], last["decoder_layers"]) == ([2], [])
    assert (last["decoder_self_attention"], last["cross_attention"]) == ([], [])
    with torch.inference_mode():
        _, maps = m.model.attention(torch.tensor([src]), torch.tensor([tgt]))  # type: ignore[operator]
    got = torch.tensor(last["encoder_self_attention"][0], dtype=torch.float32)
    torch.testing.assert_close(got, maps.encoder[2][0], atol=1e-4, rtol=0)
    r = await client.post("/attention", json=req | {"layers": [3]})
    assert r.status_code == 422
    assert "layer 3 is out of range: valid range is 0..2 (encoder 0..2, decoder 0..1)" in r.text
    r = await client.post("/attention", json=req | {"layers": [2], "format": "png"})
    assert r.status_code == 422
    assert "the PNG of a translator shows cross-attention: select a decoder layer (0..1)" in r.text


@pytest.mark.parametrize(("body", "query"), [({"format": "png"}, ""), ({}, "?format=png")])
@pytest.mark.parametrize("model", ["sentiment-ko", "translate-fr-en"])
async def test_attention_png(client: httpx.AsyncClient, body: dict[str, str], query: str, model: str) -> None:
    r = await client.post(f"/attention{query}", json={"model": model, "text": "정말 좋았어요 le chat"} | body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "image/png"
    assert r.content.startswith(b"\x89PNG\r\n\x1a\n")


async def test_attention_errors(client: httpx.AsyncClient) -> None:
    r = await client.post("/attention", json={"model": "nope", "text": "a"})
    assert r.status_code == 404
    assert "sentiment-en" in r.json()["detail"]
    r = await client.post("/attention", json={"model": "sentiment-en", "text": "a", "target": "b"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"].startswith("target: only translation models")
    r = await client.post("/attention", json={"model": "translate-fr-en", "text": "a", "target_lang": "de"})
    assert r.status_code == 422
    assert "translate-fr-en translates into en" in r.json()["detail"][0]["msg"]


# --- validation: 4xx with messages naming the field and the limit ------------------------------------------

LONG = "x" * 2001
CASES = [
    ("/sentiment", {}, ["body"], 'give exactly one of "text" or "texts"'),
    ("/sentiment", {"text": "a", "texts": ["b"]}, ["body"], 'give exactly one of "text" or "texts"'),
    ("/sentiment", {"text": ""}, ["body", "text"], "text: must not be empty"),
    ("/sentiment", {"text": "  \n"}, ["body", "text"], "text: must not be empty or whitespace only"),
    ("/sentiment", {"texts": []}, ["body", "texts"], "texts: must not be empty"),
    ("/sentiment", {"texts": ["a", ""]}, ["body", "texts", 1], "texts[1]: must not be empty"),
    ("/sentiment", {"texts": ["a"] * 65}, ["body", "texts"], "texts: at most 64 texts per request (got 65)"),
    ("/sentiment", {"texts": ["a", LONG]}, ["body", "texts", 1], "texts[1]: at most 2000 characters per text (got 2001)"),
    ("/sentiment", {"text": LONG}, ["body", "text"], "text: at most 2000 characters per text (got 2001)"),
    ("/sentiment", {"text": 3}, ["body", "text"], "text: Input should be a valid string"),
    ("/sentiment", {"texts": "abc"}, ["body", "texts"], "texts: Input should be a valid list"),
    ("/sentiment", {"text": "a", "lang": "en"}, ["body", "lang"], "lang: unknown field"),
    ("/translate", {"text": "a"}, ["body", "source_lang"], "source_lang: field required"),
    ("/translate", {"text": "a", "source_lang": "fr", "beam_size": 0}, ["body", "beam_size"], "beam_size: Input should be greater than or equal to 1"),
    ("/translate", {"text": "a", "source_lang": "fr", "beam_size": 17}, ["body", "beam_size"], "beam_size: Input should be less than or equal to 16"),
    ("/translate", {"text": "a", "source_lang": "fr", "beam_size": 2, "num_hypotheses": 3}, ["body", "num_hypotheses"], "num_hypotheses: must be at most beam_size (2), got 3"),
    ("/translate", {"text": "a", "source_lang": "fr", "length_penalty": 2.5}, ["body", "length_penalty"], "length_penalty: Input should be less than or equal to 2"),
    ("/translate", {"text": "a", "source_lang": "fr", "max_length": 513}, ["body", "max_length"], "max_length: Input should be less than or equal to 512"),
    ("/translate", {"text": "a", "source_lang": "fr", "max_length": 0}, ["body", "max_length"], "max_length: Input should be greater than or equal to 1"),
    ("/translate", {"texts": ["a"] * 65, "source_lang": "fr"}, ["body", "texts"], "texts: at most 64 texts per request (got 65)"),
    ("/attention", {"text": "a"}, ["body", "model"], "model: field required"),
    ("/attention", {"model": "sentiment-en", "text": "a", "layers": [-1]}, ["body", "layers", 0], "layers[0]: Input should be greater than or equal to 0"),
    ("/attention", {"model": "sentiment-en", "text": "a", "format": "gif"}, ["body", "format"], "format: Input should be 'json' or 'png'"),
    ("/attention", {"model": "sentiment-en", "text": LONG}, ["body", "text"], "text: at most 2000 characters per text (got 2001)"),
    ("/attention", {"model": "translate-fr-en", "text": "a", "target": LONG}, ["body", "target"], "target: at most 2000 characters per text (got 2001)"),
    # strict types: a JSON true is not 1, "3" not 3, 2.5 not an integer (2.0 is 2: JSON Schema's "integer")
    ("/translate", {"text": "a", "source_lang": "fr", "beam_size": True}, ["body", "beam_size"], "beam_size: Input should be a valid integer"),
    ("/translate", {"text": "a", "source_lang": "fr", "beam_size": "3"}, ["body", "beam_size"], "beam_size: Input should be a valid integer"),
    ("/translate", {"text": "a", "source_lang": "fr", "beam_size": 2.5}, ["body", "beam_size"], "beam_size: Input should be a valid integer"),
    ("/translate", {"text": "a", "source_lang": "fr", "return_scores": 1}, ["body", "return_scores"], "return_scores: Input should be a valid boolean"),
    ("/attention", {"model": "sentiment-en", "text": "a", "layers": [True]}, ["body", "layers", 0], "layers[0]: Input should be a valid integer"),
    # a list past the schema's hard cap stops at one error (not one per item)
    ("/sentiment", {"texts": [""] * 5000}, ["body", "texts"], "texts: List should have at most 4096 items"),
    ("/attention", {"model": "sentiment-en", "text": "a", "target_lang": "fr"}, ["body", "target_lang"], "target_lang: only translation models take a target_lang"),
    ("/attention", {"model": "translate-fr-en", "text": "a", "target": "le chat " * 200}, ["body", "target"], "-token limit of translate-fr-en (start and EOS included)"),
]  # fmt: skip


@pytest.mark.parametrize(("route", "body", "loc", "message"), CASES)
async def test_bad_input_is_422_naming_field_and_limit(
    client: httpx.AsyncClient, route: str, body: dict[str, Any], loc: list[Any], message: str
) -> None:
    r = await client.post(route, json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"] == loc and message in d["msg"] for d in detail), detail
    assert all(set(d) == {"loc", "msg", "type"} for d in detail)


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/sentiment", '{"text": "good \\ud800"}', "text"),
        ("/sentiment", '{"texts": ["ok", "\\udfff bad"]}', "texts[1]"),
        ("/sentiment", '{"text": "ok", "model": "\\ud800"}', "model"),
        ("/translate", '{"text": "Oui \\udc00.", "source_lang": "fr"}', "text"),
        ("/attention", '{"model": "translate-fr-en", "text": "a", "target": "\\ud83d"}', "target"),
    ],
)
async def test_a_lone_surrogate_is_422_not_500(
    client: httpx.AsyncClient, route: str, body: str, field: str
) -> None:
    # valid JSON (an escaped lone UTF-16 surrogate) but not text: the tokenizer cannot take it
    r = await client.post(route, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["msg"].startswith(f"{field}: contains an unpaired UTF-16 surrogate")
    assert (await client.post(route, json=json.loads(body.replace("\\u", "u")))).status_code in (200, 404)


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
async def test_a_non_finite_length_penalty_is_422(client: httpx.AsyncClient, value: bytes) -> None:
    body = (
        b'{"text": "a", "source_lang": "fr", "length_penalty": ' + value + b"}"
    )  # Python's JSON takes these
    r = await client.post("/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"] == "length_penalty: Input should be a finite number"


async def test_many_invalid_items_get_a_bounded_answer(client: httpx.AsyncClient) -> None:
    r = await client.post("/sentiment", json={"texts": [""] * 4000})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert len(detail) == 21  # the first 20 errors, then how many more
    assert detail[0]["msg"] == "texts[0]: must not be empty or whitespace only"
    assert detail[-1] == {"loc": ["body"], "msg": "body: and 3980 more errors", "type": "too_many_errors"}


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"text": "a good film"}', "application/x-www-form-urlencoded"),  # curl -d without -H
        (b'{"text": "a good film"}', "text/plain"),
        (b'["a good film"]', "application/json"),
        (b'"a good film"', "application/json"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_422_saying_so(
    client: httpx.AsyncClient, body: bytes, content_type: str
) -> None:
    r = await client.post("/sentiment", content=body, headers={"content-type": content_type})
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {
            "loc": ["body"],
            "msg": "body: must be a JSON object, sent with Content-Type: application/json",
            "type": r.json()["detail"][0]["type"],
        }
    ]


@pytest.mark.parametrize(
    ("body", "headers", "status", "why"),
    [
        (b'{"text": "caf\xe9"}', {}, 400, "body: cannot be parsed: not UTF-8: byte 0xe9 at position 13 (send JSON text in UTF-8)"),  # latin-1
        (
            gzip.compress(b'{"text": "a good film"}', mtime=0),  # one test id in every xdist worker
            {"content-encoding": "gzip"},
            415,
            "Content-Encoding gzip is not supported: send the body uncompressed",
        ),
    ],
)  # fmt: skip
async def test_an_unreadable_body_is_4xx_saying_why(
    client: httpx.AsyncClient, body: bytes, headers: dict[str, str], status: int, why: str
) -> None:
    r = await client.post("/sentiment", content=body, headers={"content-type": "application/json"} | headers)
    assert (r.status_code, r.json()) == (status, {"detail": why})
    r = await client.get("/nothing-here")  # other HTTP errors keep FastAPI's answers
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    r = await client.get("/sentiment")
    assert (r.status_code, r.headers["allow"]) == (405, "POST")


@pytest.mark.parametrize("route", ["/sentiment", "/translate", "/attention"])
async def test_malformed_json_is_422(client: httpx.AsyncClient, route: str) -> None:
    r = await client.post(route, content=b'{"text": "a",', headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"].startswith("body: invalid JSON")
    assert (await client.post("/sentiment", json={"text": "still fine"})).status_code == 200


async def test_decoding_never_runs_past_the_model_max_len(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> None:
    """max_len=16: a 12-token source's default limit (2 * 12 + 10) and max_length=100 are capped, not a 500."""
    torch.manual_seed(0)
    cfg = tiny_translation_config(tiny_vocab_size, max_len=16, tie_embeddings=False)
    save_checkpoint(
        tmp_path / "translate-fr-en", Translator(cfg).eval(), tiny_tokenizer_path, dtype=torch.float32
    )
    text = "le chat aime la maison un chien"
    async with serve(Settings(checkpoint_dir=tmp_path)) as (_, client):
        for extra in ({}, {"max_length": 100}, {"beam_size": 1}):
            r = await client.post("/translate", json={"text": text, "source_lang": "fr"} | extra)
            assert r.status_code == 200, r.text
        r = await client.post("/translate", json={"text": text * 3, "source_lang": "fr"})
        assert r.status_code == 422
        assert "16-token limit" in r.json()["detail"][0]["msg"]

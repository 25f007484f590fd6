"""Every shipped checkpoint loads, gets obvious examples right and scores above a floor on its test split."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from model import DecodeOptions, load_checkpoint
from model.inference import classify_texts, translate_texts
from training.data import resolve_data_dir
from training.evaluate import run as evaluate
from training.ship import PROBES, TEST_SETS, card_info, model_card

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
SHIPPED = sorted(p for p in CHECKPOINTS.glob("*") if (p / "config.json").is_file())
# margin under the model card's figure allowed on a 500-example slice (a slice is noisier than the full set)
MARGIN = {"accuracy": 0.03, "bleu": 6.0}
OBVIOUS_SENTIMENT = {
    "ko": [
        ("정말 재미있고 감동적인 영화였어요. 최고!", "positive"),
        ("최악의 영화. 시간 낭비였다.", "negative"),
    ],
    "en": [
        ("A wonderful, moving film with brilliant acting. I loved every minute of it.", "positive"),
        ("Terrible movie. Boring plot, awful acting, a complete waste of time.", "negative"),
    ],
}
OBVIOUS_TRANSLATION = {  # (source, words the English translation must contain)
    "fr": [
        ("Je t'aime.", {"love"}),
        ("Merci beaucoup.", {"thank"}),
        ("Où est la gare ?", {"station"}),
        ("Le chien mange.", {"dog", "eats"}),
    ],
    "es": [
        ("Te amo.", {"love"}),
        ("Muchas gracias.", {"thank"}),
        ("¿Dónde está la estación?", {"station"}),
    ],
    "de": [("Ein Mann fährt Fahrrad.", {"man"}), ("Zwei Hunde spielen im Schnee.", {"dogs", "snow"})],
}

pytestmark = pytest.mark.skipif(not SHIPPED, reason="no shipped checkpoints in checkpoints/")


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.mark.parametrize("path", SHIPPED, ids=_ids(SHIPPED))
def test_shipped_checkpoint_is_complete(path: Path) -> None:
    assert sum(f.stat().st_size for f in path.iterdir()) < 30 * 2**20
    for name in ("config.json", "model.safetensors", "tokenizer.model", "README.md", "metrics.json"):
        assert (path / name).is_file(), name
    assert "test" in json.loads((path / "metrics.json").read_text())


TRANSLATORS = [p for p in SHIPPED if p.name.startswith("translate-")]


@pytest.mark.parametrize("path", TRANSLATORS, ids=_ids(TRANSLATORS))
def test_translator_card_states_its_domain_and_limits(path: Path) -> None:
    """The recipe's domain and limits are in config.json (what /models shows) and the README, which
    `python -m training card` regenerates as it is; each limit's output is what the model answers."""
    info = card_info(path.name)
    assert info is not None
    assert json.loads((path / "config.json").read_text())["card"] == info
    assert (path / "README.md").read_text() == model_card(path, path.name)
    assert ("Tatoeba" if path.name != "translate-de-en" else "Multi30k") in info["domain"]
    assert "news text" in {x["kind"] for x in info["limits"]}
    m = load_checkpoint(path)
    sources = [x["source"] for x in info["limits"]]
    got = translate_texts(m.model, m.tokenizer, sources, DecodeOptions(beam_size=4), "en")  # type: ignore[arg-type]
    assert [hyps[0][0] for hyps in got] == [x["output"] for x in info["limits"]]


@pytest.mark.parametrize("path", SHIPPED, ids=_ids(SHIPPED))
def test_card_and_config_carry_no_machine_paths_sessions_or_long_floats(path: Path) -> None:
    for name in ("README.md", "config.json", "metrics.json"):
        text = (path / name).read_text()
        assert not re.findall(r"(?<![\w.])/(?:work|home|root|tmp|Users)/", text), name  # absolute paths
        assert not re.findall(r"[Ss]ession", text), name
        assert not re.findall(r"\d\.\d{5,}", text), name  # unrounded floats


@pytest.mark.parametrize("path", SHIPPED, ids=_ids(SHIPPED))
def test_obvious_examples(path: Path) -> None:
    loaded = load_checkpoint(path)
    cfg = loaded.config
    if cfg.task == "sentiment":
        cases = [c for lang in cfg.source_langs for c in OBVIOUS_SENTIMENT.get(lang, [])]
        probs = classify_texts(loaded.model, loaded.tokenizer, [t for t, _ in cases])
        labels = [cfg.labels[i] for i in probs.argmax(-1).tolist()]
        assert labels == [want for _, want in cases]
    else:
        cases = [c for lang in cfg.source_langs for c in OBVIOUS_TRANSLATION.get(lang, [])]
        out = translate_texts(
            loaded.model, loaded.tokenizer, [s for s, _ in cases], DecodeOptions(beam_size=4)
        )
        for (src, words), hyps in zip(cases, out, strict=True):
            text = hyps[0][0].lower()
            assert all(w in text for w in words), (src, text)


@pytest.mark.data
@pytest.mark.parametrize("path", SHIPPED, ids=_ids(SHIPPED))
def test_scores_above_floor_on_test_slice(path: Path) -> None:
    meta = json.loads((path / "config.json").read_text())
    rel, fmt, metric = TEST_SETS[meta["training"]["config"]["dataset"]]
    data = resolve_data_dir() / rel
    if not (data.exists() or Path(f"{data}.en").exists()):
        pytest.skip(f"{data} not available (../shared/data absent)")
    card = json.loads((path / "metrics.json").read_text())["test"][metric]
    res = evaluate(path, data, fmt, beam_size=4, limit=500)
    assert res["n"] == 500
    assert res[metric] >= card - MARGIN[metric], (
        f"{path.name}: {metric} {res[metric]} on 500 test examples, card says {card}"
    )


CLASSIFIERS = [p for p in SHIPPED if p.name.startswith("sentiment-")]


@pytest.mark.parametrize("path", CLASSIFIERS, ids=_ids(CLASSIFIERS))
def test_classifier_is_calibrated_as_its_card_says(path: Path) -> None:
    """Its temperature is the one calibrate fitted; the card's ECE on test meets the target (<= 0.05) and
    beats T = 1; on the short-text probe the wrong answers score below 0.9 on average."""
    meta = json.loads((path / "config.json").read_text())
    temperature = meta["model"]["temperature"]
    assert temperature == meta["training"]["calibration"]["temperature"] > 1.0
    metrics = json.loads((path / "metrics.json").read_text())
    assert metrics["test"]["temperature"] == temperature
    assert metrics["test"]["ece"] <= 0.05 < metrics["test"]["ece_at_t1"]
    assert metrics["probe"]["mean_score_wrong"] < 0.9


@pytest.mark.parametrize("path", CLASSIFIERS, ids=_ids(CLASSIFIERS))
def test_probe_figures_are_what_the_classifier_answers(path: Path) -> None:
    """The card's short-text probe figures, measured again (its texts are few and short)."""
    card = json.loads((path / "metrics.json").read_text())["probe"]
    lang = load_checkpoint(path).config.source_langs[0]
    res = evaluate(path, PROBES / f"{lang}.jsonl", "probe")
    for key in ("accuracy", "mean_score_wrong", "mean_score_right", "ece"):
        assert round(res[key], 4) == pytest.approx(card[key], abs=1e-4), key
    assert res["accuracy_by_kind"] == card["accuracy_by_kind"]

"""Sentence splitting for /translate (app.text.sentences) on the corpus tests/app/data/sentence_splits.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from app.text.sentences import split_line, split_sentences

CORPUS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "sentence_splits.json").read_text()
)["cases"]


def test_the_corpus_covers_each_language() -> None:
    counts = {lang: sum(c["lang"] == lang for c in CORPUS) for lang in ("de", "fr", "es", "en")}
    assert sum(counts.values()) >= 30
    assert min(counts.values()) >= 5


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: f"{c['lang']}:{c['text'][:30]}")
def test_corpus_case(case: dict[str, Any]) -> None:
    assert split_line(case["lang"], case["text"]) == case["sentences"]


def test_lines_stay_lines_and_joined_sentences_keep_their_spacing() -> None:
    text = "M. Dupont est là.  Il part.\n\n  Oui… Non !\n"
    assert split_sentences(text, "fr") == [["M. Dupont est là.", "Il part."], [], ["Oui…", "Non !"], []]
    assert split_line("es", "Vivo en el n.º  5. Ven.") == ["Vivo en el n.º  5.", "Ven."]


def test_lower_case_sentences_stay_apart() -> None:
    assert split_line("fr", "le chat. le chien !") == ["le chat.", "le chien !"]


def test_a_language_without_its_own_rules_still_splits() -> None:
    assert split_line("ko", "안녕하세요. 반가워요!") == ["안녕하세요.", "반가워요!"]
    assert split_line("xx", "Dr. Smith is here. He left.") == ["Dr. Smith is here.", "He left."]


@pytest.mark.parametrize(
    ("lang", "text", "sentences"),
    [
        (
            "fr",
            "1. Ouvrez la porte. 2. Fermez la fenêtre.",
            ["1.", "Ouvrez la porte.", "2.", "Fermez la fenêtre."],
        ),
        ("fr", "• Je suis flattée. a) Je me sens soulagé.", ["• Je suis flattée.", "a) Je me sens soulagé."]),
        ("es", "Abre la puerta. 2) Cierra la ventana.", ["Abre la puerta.", "2) Cierra la ventana."]),
        ("fr", "- Bonjour. - Salut, ça va ?", ["- Bonjour.", "- Salut, ça va ?"]),  # dialogue dashes
        ("fr", "Il fait beau. 7", ["Il fait beau.", "7"]),
        ("fr", "A-t-on besoin ? 10:15.", ["A-t-on besoin ?", "10:15."]),
        ("fr", "Il est là. 15 € 😀", ["Il est là.", "15 € 😀"]),
        ("fr", "Il a dit : « Je reviens. »", ["Il a dit : « Je reviens. »"]),  # punctuation stays
        ("fr", "Il fait beau 7", ["Il fait beau 7"]),  # no sentence end: one sentence
    ],
)
def test_list_markers_and_letterless_tails_are_sentences(lang: str, text: str, sentences: list[str]) -> None:
    """A list marker after a sentence's end opens the next sentence; a letterless tail with a digit or a symbol
    after a sentence's end is a sentence of its own (it passes through untranslated)."""
    assert split_line(lang, text) == sentences


@pytest.mark.anyio
async def test_translate_items_follow_the_splitter(app: FastAPI) -> None:
    """One batch item per sentence; the layout puts each line back (TextLayout contract)."""
    handler = app.state.service.tasks["translation"].handlers["translate-fr-en"]
    texts = ["M. Dupont est là. Il part.\nOui.", "Voir p. 12 pour les détails."]
    items, layouts = handler.sentences([split_sentences(t, "fr") for t in texts], "texts", 1)
    assert len(items) == 4
    assert [lay.lines for lay in layouts] == [[[0, 1], [2]], [[3]]]

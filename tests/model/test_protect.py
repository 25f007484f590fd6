"""Protected items (model/protect.py): what is found, what the model reads, and where each item stood."""

from __future__ import annotations

import pytest

from model.protect import Protected, find_items, protect


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("Le v2.3 Japon.", ["v2.3"]),
        ("Je garderai cela COVID-19 à l'esprit.", ["COVID-19"]),
        ("Imprimez-le sur du A4.", ["A4"]),
        ("Veuillez 100 sourire.", ["100"]),
        ("Il coûte 15 € ou $20.", ["15 €", "$20"]),
        ("Le 12/03/2024 à 19:30.", ["12/03/2024", "19:30"]),
        ("Avant 14 h 30 ou 8h30.", ["14 h 30", "8h30"]),
        ("Appelle le +33 6 12 34 56 78.", ["+33 6 12 34 56 78"]),
        ("Le taux est de 50 %.", ["50 %"]),
        ("Va sur https://x.org/a?b=1.", ["https://x.org/a?b=1"]),
        ("Écris à jean.dupont@mail.fr !", ["jean.dupont@mail.fr"]),
        ("Merci @tom pour #vacances", ["@tom", "#vacances"]),
        ("Super 😀😀 et ❤️ !", ["😀😀", "❤️"]),
        ("Tom & Jerry → ici", ["&", "→"]),
        ("1. Ouvrez la porte.", ["1."]),
        ("2) Fermez.", ["2)"]),
        ("• Un point", ["•"]),
        ("Le film (2019) est bon.", ["(2019)"]),
        ("Le prix (TVA 20 %) est bas.", ["(TVA 20 %)"]),  # the brackets a name, code or link fills
        ("Le [v2.3] ou (https://x.org) ou ((COVID-19))", ["[v2.3]", "(https://x.org)", "((COVID-19))"]),
        ("Il fait beau 7", ["7"]),
        ("J'ai un iOS 17 et GPT 4.", ["iOS 17", "GPT 4"]),
        ("Il coûte 15 € - 20 €.", ["15 € - 20 €"]),  # a range
        ("Tu viens 92 % ? 15:30", ["92 %", "15:30"]),  # the "?" is the sentence's
        ("Vous @photo22 46 % a dit", ["@photo22 46 %"]),
    ],
)
def test_finds_each_class(text: str, items: list[str]) -> None:
    assert [text[a:b] for a, b in find_items(text)] == items


@pytest.mark.parametrize(
    "text",
    [
        "C'est le 1er mai, le 2e jour.",  # ordinals are words
        "Il a dit : « oui » !",  # punctuation alone is the model's
        "M&M's et Tom&Jerry",  # glued to letters: taking it out would join words
        "Une phrase sans rien.",
        "A. Dupont est là.",  # an initial, not a list marker
    ],
)
def test_leaves_words_and_punctuation(text: str) -> None:
    assert find_items(text) == []
    assert protect(text) == Protected(text)


def test_neighbours_with_a_space_between_are_one_item() -> None:
    assert protect("Merci @tom #super 😀😀 !") == Protected("Merci !", ((5, "@tom #super 😀😀"),))


@pytest.mark.parametrize(
    ("text", "read", "items"),
    [
        ("Veuillez sourire 100 à la caméra.", "Veuillez sourire à la caméra.", ((16, "100"),)),
        ("Il fait beau 7.", "Il fait beau.", ((12, "7"),)),
        ("7 😀 jours", "jours", ((0, "7 😀"),)),
        ("1. Ouvrez la porte.", "Ouvrez la porte.", ((0, "1."),)),
        ("Je pars à 19:30 et 2 v2.3 ici.", "Je pars à et ici.", ((9, "19:30"), (12, "2 v2.3"))),
        ("Il coûte 15 €, pas plus.", "Il coûte, pas plus.", ((8, "15 €"),)),
        ("COVID-19", "", ((0, "COVID-19"),)),
        (
            "Le prix (TVA 20 %) est bas.",
            "Le prix est bas.",
            ((7, "(TVA 20 %)"),),
        ),  # no "()" left to the model
    ],
)
def test_the_model_reads_the_sentence_without_its_items(
    text: str, read: str, items: tuple[tuple[int, str], ...]
) -> None:
    """The text the model reads is the sentence as written without the items (one space taken with each),
    and each item keeps where it stood in that text."""
    assert protect(text) == Protected(read, items)


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("Tom tiene 70 años.", [(10, 12)]),
        ("Veuillez 100 sourire.", [(9, 12)]),
        ("Il gagne 300.000 yens.", [(9, 16)]),
        ("J'ai 3 chats et 2 chiens.", [(5, 6), (16, 17)]),
    ],
)
def test_a_number_counting_the_next_word_stays_in_place(text: str, spans: list[tuple[int, int]]) -> None:
    """A quantity ("70 años") stays where it is, for the caller to mask as one <unk>; without placeholders
    (byte fallback) it is taken out like any item."""
    assert protect(text) == Protected(text, (), tuple(spans))
    assert [item for _, item in protect(text, quantities=False).items] == [text[a:b] for a, b in spans]

"""bench/glossary.py: terms built from the data are in their sentences and references, the set is seeded, and
counting is exact."""

from __future__ import annotations

from bench.glossary import KINDS, Case, Cooccurrence, build_set, given

TRAIN = [
    ("Le chat dort.", "The cat sleeps."),
    ("Un chat noir.", "A black cat."),
    ("Mon chat mange.", "My cat eats."),
    ("Tom prend la voiture.", "Tom takes the car."),
    ("La voiture est rouge.", "The car is red."),
    ("Ma voiture roule.", "My car runs."),
    ("Tom lit la salle de bain.", "Tom reads the bathroom."),
    ("Une salle de bain propre.", "A clean bathroom."),
    ("La salle de bain est petite.", "The bathroom is small."),
] * 2
TEST = [
    ("Demain Tom lave la voiture.", "Tomorrow Tom washes the car."),
    ("La salle de bain.", "The bathroom."),
]


def test_terms_are_in_their_sentence_and_reference_and_the_set_is_seeded() -> None:
    co = Cooccurrence(TRAIN)
    cases = build_set(TEST * 5, co, 6, seed=1)
    assert cases == build_set(TEST * 5, co, 6, seed=1)
    assert len(cases) == 6
    for case in cases:
        assert 1 <= len(case.terms) <= 3
        for kind, source, target in case.terms:
            assert kind in KINDS
            assert source.lower() in case.src.lower()
            assert target in case.ref
    kinds = {kind for c in cases for kind, _, _ in c.terms}
    assert {"product", "multiword"} <= kinds


def test_given_counts_exact_text_per_kind() -> None:
    case = Case("x", "y", (("name", "Tom", "Tom"), ("product", "voiture", "car")))
    case = Case("x", "Tom takes the car.", case.terms)
    kept, total, once = given([case, case], ["Tom takes the Car.", "Tom takes the car car."])
    assert (kept["name"], kept["product"], total["product"]) == (2, 1, 2)
    assert once == 2  # "Tom" twice; "car" as often as in the reference: never (0 and 2 against 1)

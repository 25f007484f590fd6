"""bench/real_text.py: the item set is seeded, every item is in its sentence, and counting is exact."""

from __future__ import annotations

from bench.real_text import KINDS, Case, build_set, preserved, unchanged, words_only

SENTENCES = [f"Phrase numéro {w} est courte." for w in ("un", "deux", "trois", "quatre", "cinq", "six")]


def test_the_set_is_seeded_and_holds_its_items() -> None:
    cases = build_set(SENTENCES * 10, 40, seed=3)
    assert cases == build_set(SENTENCES * 10, 40, seed=3)
    assert cases != build_set(SENTENCES * 10, 40, seed=4)
    for case in cases:
        assert 1 <= len(case.items) <= 2
        assert all(kind in KINDS and item in case.text for kind, item in case.items)
        assert not case.text.startswith(tuple(item for _, item in case.items))  # inserted after a word


def test_preserved_counts_exact_text_per_kind() -> None:
    cases = [Case("a 15 € b", (("price", "15 €"),)), Case("a 19:30 😀", (("time", "19:30"), ("emoji", "😀")))]
    kept, total = preserved(cases, ["A 15€ B", "A 19:30 😀"])
    assert (kept["price"], kept["time"], kept["emoji"]) == (0, 1, 1)
    assert sum(total.values()) == 3


def test_the_rest_compares_words_only_without_the_items() -> None:
    assert words_only("I'm 20, OK?") == "im20ok"
    cases = [Case("a 15 € b", (("price", "15 €"),), "a b"), Case("c 😀 d", (("emoji", "😀"),), "c d")]
    assert unchanged(cases, ["A 15 € b!", "C 😀 e"], ["A b.", "C d"]) == 1
    for case in build_set(SENTENCES * 10, 40, seed=3):
        assert case.plain in SENTENCES

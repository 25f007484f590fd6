"""bench/vs_libretranslate.py without LibreTranslate: it skips saying why, its Argos package reads back, and
the launcher's rule split (no LibreTranslate import needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.lt_launcher import rule_split
from bench.vs_libretranslate import build_argos_package, main, words_of
from engines.argos import read_argos_package


def test_skips_without_libretranslate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--libretranslate-python", str(tmp_path / "missing" / "python")]) == 0
    assert capsys.readouterr().out.startswith("skipped: no LibreTranslate at ")


def test_argos_package_of_a_checkpoint(tiny_translator_checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    package = read_argos_package(
        build_argos_package(tiny_translator_checkpoint, tmp_path / "translate-fr_en")
    )
    assert package.config.source_langs == ("fr",)
    assert package.config.target_langs == ("en",)
    assert (package.path / "model" / "model.bin").is_file()


def test_rule_split_and_words() -> None:
    assert rule_split(" Je comprends. Il fait beau !  Oui… non ") == [
        "Je comprends.",
        "Il fait beau !",
        "Oui…",
        "non",
    ]
    assert words_of("It's fine today!") == words_of("it's fine today.")

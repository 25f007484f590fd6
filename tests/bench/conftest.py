"""The bench's checkpoint directories: the shared tiny sentiment-en, sentiment-ko and translate-fr-en, and
translate-fr-en alone (for runs that measure only it: its servers load nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import link_checkpoints


@pytest.fixture(scope="session")
def bench_checkpoint_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_sentiment_ko_checkpoint: Path,
    tiny_translator_checkpoint: Path,
) -> Path:
    root = tmp_path_factory.mktemp("bench-checkpoints")
    return link_checkpoints(
        root, tiny_sentiment_checkpoint, tiny_sentiment_ko_checkpoint, tiny_translator_checkpoint
    )


@pytest.fixture(scope="session")
def bench_translator_dir(tmp_path_factory: pytest.TempPathFactory, tiny_translator_checkpoint: Path) -> Path:
    return link_checkpoints(tmp_path_factory.mktemp("bench-translator"), tiny_translator_checkpoint)

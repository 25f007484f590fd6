"""The bench's checkpoint directory: the shared tiny sentiment-en, sentiment-ko and translate-fr-en."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def bench_checkpoint_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_sentiment_ko_checkpoint: Path,
    tiny_translator_checkpoint: Path,
) -> Path:
    root = tmp_path_factory.mktemp("bench-checkpoints")
    for ckpt in (tiny_sentiment_checkpoint, tiny_sentiment_ko_checkpoint, tiny_translator_checkpoint):
        (root / ckpt.name).symlink_to(ckpt, target_is_directory=True)
    return root

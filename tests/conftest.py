"""Shared fixtures: a tiny real sentencepiece model and tiny random-init checkpoints built in tmp dirs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from bench.machine import describe
from bench.tiny import (  # the one builder of tiny models and tokenizers, re-exported for the tests
    make_corpus,
    piece_count,
    tiny_sentiment_config,
    tiny_translation_config,
    train_tokenizer,
)
from model import SentimentClassifier, Translator, save_checkpoint

__all__ = ["make_corpus", "tiny_sentiment_config", "tiny_translation_config"]

TINY_VOCAB = 200
Model = SentimentClassifier | Translator
SEED = 1234


@pytest.hookimpl(trylast=True)  # after pytest's own reordering for fixtures: within a file, its order stays
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Test files with the most `slow` tests first (a stable sort: the rest keep their order). pytest-xdist
    with `--dist loadfile --no-loadscope-reorder` (make test) hands files to its workers in this order, so the
    long files (servers in subprocesses, training) start first and the many short ones fill in at the end,
    rather than one long file starting last on one worker while the other waits."""
    slow: dict[str, int] = {}
    for item in items:
        if item.get_closest_marker("slow") is not None:
            slow[item.path.as_posix()] = slow.get(item.path.as_posix(), 0) + 1
    items.sort(key=lambda item: -slow.get(item.path.as_posix(), 0))


def pytest_report_header() -> str:
    return f"machine: {describe()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """A failing run names its machine just above the short summary of its failures: float rounding differs
    between CPUs (and between torch's kernels for them), so a failure seen on one may not show on another."""
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        terminalreporter.write_line(f"failed on: {describe()}", red=True, bold=True)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny models run faster on one intra-op thread, and tests then leave the other core to real work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _one_torch_thread_again() -> Iterator[None]:
    """A server under test sets torch's process-wide thread count (APP_TORCH_THREADS), and the default
    inference worker count reads it: each test starts from one thread again."""
    yield
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real unigram sentencepiece model (~200 pieces, pad 0 / unk 1 / bos 2 / eos 3) trained in a tmp dir."""
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"), TINY_VOCAB)


@pytest.fixture(scope="session")
def tiny_vocab_size(tiny_tokenizer_path: Path) -> int:
    return piece_count(tiny_tokenizer_path)


def link_checkpoints(root: Path, *checkpoints: Path) -> Path:
    """`root` made an app's checkpoint dir: a symlink to each checkpoint under its own name."""
    for checkpoint in checkpoints:
        (root / checkpoint.name).symlink_to(checkpoint, target_is_directory=True)
    return root


@dataclass(frozen=True)
class TinyCheckpoints:
    """Where the tiny checkpoints go (an app's model dir), with the tokenizer they share."""

    root: Path
    tokenizer: Path
    vocab_size: int

    def save(self, name: str, seed: int, build: Callable[[int], Model], **meta: object) -> Path:
        """Seed torch, build(vocab_size) a model and save it as the float32 checkpoint root/NAME."""
        torch.manual_seed(seed)
        model = build(self.vocab_size).eval()
        return save_checkpoint(self.root / name, model, self.tokenizer, dtype=torch.float32, **meta)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def tiny_checkpoints(
    tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> TinyCheckpoints:
    return TinyCheckpoints(tmp_path_factory.mktemp("checkpoints"), tiny_tokenizer_path, tiny_vocab_size)


def sentiment_en(vocab_size: int) -> SentimentClassifier:
    return SentimentClassifier(tiny_sentiment_config(vocab_size))


def sentiment_ko(vocab_size: int) -> SentimentClassifier:
    """With a hashed n-gram head (random weights), so every serving test of it covers that path too."""
    model = SentimentClassifier(tiny_sentiment_config(vocab_size, ngram="w2c3", ngram_buckets=4096))
    assert model.ngram is not None
    torch.nn.init.normal_(model.ngram.table.weight, std=0.5)
    return model


def translate_fr_en(vocab_size: int) -> Translator:
    return Translator(tiny_translation_config(vocab_size))


@pytest.fixture(scope="session")
def tiny_sentiment_checkpoint(tiny_checkpoints: TinyCheckpoints) -> Path:
    return tiny_checkpoints.save("sentiment-en", SEED, sentiment_en, metrics={"accuracy": 0.5})


@pytest.fixture(scope="session")
def tiny_sentiment_ko_checkpoint(tiny_checkpoints: TinyCheckpoints) -> Path:
    return tiny_checkpoints.save("sentiment-ko", SEED + 1, sentiment_ko, metrics={"accuracy": 0.5})


@pytest.fixture(scope="session")
def tiny_translator_checkpoint(tiny_checkpoints: TinyCheckpoints) -> Path:
    return tiny_checkpoints.save("translate-fr-en", SEED, translate_fr_en, metrics={"bleu": 0.0})


@pytest.fixture(scope="session")
def two_models_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_translator_checkpoint: Path,
) -> Path:
    """A checkpoint dir like the image's: sentiment-en (cheap) and translate-fr-en (expensive), tiny, random."""
    root = tmp_path_factory.mktemp("two-models")
    return link_checkpoints(root, tiny_sentiment_checkpoint, tiny_translator_checkpoint)


@pytest.fixture(scope="session")
def tiny_marian_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny OPUS-MT-like folder (transformers' layout, briefly trained fr -> en): tests.tiny_marian."""
    pytest.importorskip("transformers")
    from tests.tiny_marian import build_marian

    return build_marian(tmp_path_factory.mktemp("hf") / "opus-mt-fr-en")

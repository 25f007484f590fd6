"""Shared fixtures: a tiny real sentencepiece model and tiny random-init checkpoints built in tmp dirs."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from model import ModelConfig, SentimentClassifier, Translator, save_checkpoint

TINY_VOCAB = 200
SEED = 1234

_EN = {
    "subj": [
        "the cat",
        "a dog",
        "my friend",
        "the teacher",
        "this movie",
        "the story",
        "our team",
        "she",
        "he",
    ],
    "verb": ["likes", "sees", "wants", "finds", "watches", "loves", "hates", "reads", "opens"],
    "obj": ["the house", "a book", "the river", "good food", "the music", "a small car", "the garden"],
    "adv": ["today", "again", "very much", "at night", "every day", "slowly", "with joy"],
}
_FR = {
    "subj": [
        "le chat",
        "un chien",
        "mon ami",
        "la maîtresse",
        "ce film",
        "l'histoire",
        "notre équipe",
        "elle",
    ],
    "verb": ["aime", "voit", "veut", "trouve", "regarde", "adore", "déteste", "lit", "ouvre"],
    "obj": ["la maison", "un livre", "la rivière", "un bon repas", "la musique", "une petite voiture"],
    "adv": ["aujourd'hui", "encore", "beaucoup", "la nuit", "chaque jour", "lentement", "avec joie"],
}
_KO = {
    "subj": ["이 영화", "배우 연기", "스토리", "음악", "결말", "이 드라마", "감독"],
    "adj": ["정말 좋았어요", "너무 재미없어요", "최고입니다", "별로였다", "감동적이에요", "지루했어요"],
    "tail": ["", " 추천합니다", " 다시 보고 싶다", " 시간 낭비", " ㅋㅋ", " 강추!"],
}


def make_corpus(n: int = 300, seed: int = 0) -> list[str]:
    """Language-like synthetic sentences: English, French (accents) and Korean reviews (Hangul)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        for vocab in (_EN, _FR):
            s = f"{rng.choice(vocab['subj'])} {rng.choice(vocab['verb'])} {rng.choice(vocab['obj'])}"
            if rng.random() < 0.6:
                s += f" {rng.choice(vocab['adv'])}"
            lines.append(s.capitalize() + rng.choice([".", "!", "?", " ."]))
        lines.append(f"{rng.choice(_KO['subj'])} {rng.choice(_KO['adj'])}{rng.choice(_KO['tail'])}")
    return lines


def tiny_sentiment_config(vocab_size: int, **overrides: object) -> ModelConfig:
    kw: dict[str, object] = {
        "task": "sentiment",
        "vocab_size": vocab_size,
        "d_model": 32,
        "n_heads": 2,
        "n_layers": 2,
        "d_ff": 64,
        "dropout": 0.0,
        "labels": ("negative", "positive"),
    }
    return ModelConfig(**(kw | overrides))  # type: ignore[arg-type]


def tiny_translation_config(vocab_size: int, **overrides: object) -> ModelConfig:
    kw: dict[str, object] = {
        "task": "translation",
        "vocab_size": vocab_size,
        "d_model": 32,
        "n_heads": 2,
        "n_layers": 2,
        "n_decoder_layers": 2,
        "d_ff": 64,
        "dropout": 0.0,
        "source_langs": ("fr",),
        "target_langs": ("en",),
    }
    return ModelConfig(**(kw | overrides))  # type: ignore[arg-type]


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny models run faster on one intra-op thread, and tests then leave the other core to real work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real unigram sentencepiece model (~200 pieces, pad 0 / unk 1 / bos 2 / eos 3) trained in a tmp dir."""
    root = tmp_path_factory.mktemp("tokenizer")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(make_corpus()) + "\n", encoding="utf-8")
    prefix = root / "tiny"
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        model_type="unigram",
        vocab_size=TINY_VOCAB,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


@pytest.fixture(scope="session")
def tiny_vocab_size(tiny_tokenizer_path: Path) -> int:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(tiny_tokenizer_path.read_bytes())
    return sp.get_piece_size()


def _save(
    root: Path, name: str, model: SentimentClassifier | Translator, tokenizer_path: Path, **meta: object
) -> Path:
    return save_checkpoint(root / name, model.eval(), tokenizer_path, dtype=torch.float32, **meta)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def tiny_checkpoints_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Parent dir of the tiny checkpoints (an app's model dir)."""
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_sentiment_checkpoint(
    tiny_checkpoints_dir: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> Path:
    torch.manual_seed(SEED)
    model = SentimentClassifier(tiny_sentiment_config(tiny_vocab_size))
    return _save(tiny_checkpoints_dir, "sentiment-en", model, tiny_tokenizer_path, metrics={"accuracy": 0.5})


@pytest.fixture(scope="session")
def tiny_sentiment_ko_checkpoint(
    tiny_checkpoints_dir: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> Path:
    """With a hashed n-gram head (random weights), so every serving test of it covers that path too."""
    torch.manual_seed(SEED + 1)
    model = SentimentClassifier(tiny_sentiment_config(tiny_vocab_size, ngram="w2c3", ngram_buckets=4096))
    assert model.ngram is not None
    torch.nn.init.normal_(model.ngram.table.weight, std=0.5)
    return _save(tiny_checkpoints_dir, "sentiment-ko", model, tiny_tokenizer_path, metrics={"accuracy": 0.5})


@pytest.fixture(scope="session")
def tiny_translator_checkpoint(
    tiny_checkpoints_dir: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> Path:
    torch.manual_seed(SEED)
    model = Translator(tiny_translation_config(tiny_vocab_size))
    return _save(tiny_checkpoints_dir, "translate-fr-en", model, tiny_tokenizer_path, metrics={"bleu": 0.0})


@pytest.fixture(scope="session")
def two_models_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_translator_checkpoint: Path,
) -> Path:
    """A checkpoint dir like the image's: sentiment-en (cheap) and translate-fr-en (expensive), tiny, random."""
    root = tmp_path_factory.mktemp("two-models")
    for checkpoint in (tiny_sentiment_checkpoint, tiny_translator_checkpoint):
        (root / checkpoint.name).symlink_to(checkpoint, target_is_directory=True)
    return root

"""The one builder of tiny models and tokenizers, for the tests (tests/conftest.py) and the benchmarks
(bench/make_tiny_checkpoints.py, bench/decoding.py): language-like synthetic sentences, a real sentencepiece
model trained on them, and small ModelConfigs whose fields any caller may override. Weights are random: the
caller seeds torch before building a model."""

from __future__ import annotations

import random
from pathlib import Path

import sentencepiece as spm

from model import ModelConfig

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
    """3 * n language-like synthetic sentences: English, French (accents) and Korean reviews (Hangul)."""
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


def train_tokenizer(root: Path, vocab_size: int, lines: list[str] | None = None, name: str = "tiny") -> Path:
    """A real unigram sentencepiece model (pad 0 / unk 1 / bos 2 / eos 3, at most `vocab_size` pieces) trained on
    `lines` (default: make_corpus()) -> root/NAME.model."""
    corpus = root / f"{name}.corpus.txt"
    corpus.write_text("\n".join(make_corpus() if lines is None else lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(root / name), model_type="unigram", vocab_size=vocab_size,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, character_coverage=1.0, hard_vocab_limit=False,
        num_threads=1, minloglevel=2,
    )  # fmt: skip
    corpus.unlink()
    return root / f"{name}.model"


def piece_count(tokenizer: Path) -> int:
    """The vocabulary size of a sentencepiece model file."""
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(tokenizer.read_bytes())
    return int(sp.get_piece_size())


def tiny_sentiment_config(vocab_size: int, **overrides: object) -> ModelConfig:
    """A 2-layer, d_model 32 negative/positive classifier."""
    kw: dict[str, object] = {
        "task": "sentiment", "vocab_size": vocab_size, "d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64,
        "dropout": 0.0, "labels": ("negative", "positive"),
    }  # fmt: skip
    return ModelConfig(**(kw | overrides))  # type: ignore[arg-type]


def tiny_translation_config(vocab_size: int, **overrides: object) -> ModelConfig:
    """A 2 + 2-layer, d_model 32 fr -> en translator."""
    kw: dict[str, object] = {
        "task": "translation", "vocab_size": vocab_size, "d_model": 32, "n_heads": 2, "n_layers": 2,
        "n_decoder_layers": 2, "d_ff": 64, "dropout": 0.0, "source_langs": ("fr",), "target_langs": ("en",),
    }  # fmt: skip
    return ModelConfig(**(kw | overrides))  # type: ignore[arg-type]

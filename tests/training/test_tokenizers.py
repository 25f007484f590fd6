"""Tokenizers for the next models: byte fallback and split digits, so no text encodes to <unk>."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import Tokenizer
from model.preprocess import source_ids
from model.protect import protect
from model.unknowns import SENTINEL, encode_source
from tests.conftest import make_corpus, tiny_translation_config
from training.tokenizers import MIN_BYTE_FALLBACK_VOCAB, train_tokenizer

REAL_TEXT = ["12 € 😀", "Le billet coûte 15 € et le train part à 19:30.", "50 % & #tag @you 👍🏽"]


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    path = tmp_path_factory.mktemp("tok") / "bytes.model"
    numbers = [f"Room {n} costs {7 * n} euros in {1990 + n}." for n in range(100)]
    return Tokenizer(train_tokenizer(make_corpus() + numbers, path, MIN_BYTE_FALLBACK_VOCAB, num_threads=1))


@pytest.mark.parametrize("text", REAL_TEXT)
def test_byte_fallback_encodes_every_character_and_decodes_back(byte_tokenizer: Tokenizer, text: str) -> None:
    ids = byte_tokenizer.encode(text)
    assert byte_tokenizer.unk_id not in ids
    assert byte_tokenizer.decode(ids) == text


def test_digits_are_split(byte_tokenizer: Tokenizer) -> None:
    """Each digit its own piece, however often a number occurred in training ("1990" + n above)."""
    pieces = [p.lstrip("\u2581") for p in byte_tokenizer.pieces(byte_tokenizer.encode("in 2025 1995"))]
    assert [p for p in pieces if p.isdigit()] == list("20251995"), pieces


def test_no_masking_without_unknowns(byte_tokenizer: Tokenizer) -> None:
    """A byte-fallback model reads its source with the protected items taken out (quantities too: it has no
    placeholder), and nothing masked as <unk>."""
    assert not byte_tokenizer.encodes_unknown(SENTINEL)
    cfg = tiny_translation_config(byte_tokenizer.vocab_size)
    for text in REAL_TEXT:
        src = encode_source(byte_tokenizer, text, cfg)
        assert src.ids == source_ids(byte_tokenizer, protect(text, quantities=False).text, cfg)
        assert cfg.unk_id not in src.ids
        assert [item for _, item in src.items]  # every one of these texts has items, and they come back


def test_small_vocabulary_trains_without_byte_fallback(tmp_path: Path) -> None:
    tok = Tokenizer(train_tokenizer(make_corpus(), tmp_path / "small.model", 120, num_threads=1))
    assert tok.vocab_size < MIN_BYTE_FALLBACK_VOCAB
    assert tok.unk_id in tok.encode("😀")


def test_split_digits_and_byte_fallback_can_be_off(tmp_path: Path) -> None:
    """The shipped checkpoints' tokenizers (their recipes pin both off): numbers keep multi-digit pieces."""
    numbers = [f"Room {n} costs {7 * n} euros in {1990 + n}." for n in range(100)]
    path = tmp_path / "plain.model"
    tok = Tokenizer(
        train_tokenizer(
            make_corpus() + numbers,
            path,
            MIN_BYTE_FALLBACK_VOCAB,
            num_threads=1,
            split_digits=False,
            byte_fallback=False,
        )
    )
    assert tok.unk_id in tok.encode("😀")
    pieces = [p.lstrip("\u2581") for p in tok.pieces(tok.encode("in 1995"))]
    assert any(len(p) > 1 and p.isdigit() for p in pieces), pieces

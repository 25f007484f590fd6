"""Train a sentencepiece tokenizer on training text only (ids: pad 0, unk 1, bos 2, eos 3).

Byte fallback (a character outside the vocabulary becomes its UTF-8 bytes, each a piece of its own) and split
digits (each digit a piece) are on by default (TrainConfig spm_byte_fallback, spm_split_digits): a model
trained on such a tokenizer never sees <unk>, and copies numbers digit by digit. The shipped checkpoints
predate this, and their recipes pin both off: their <unk>s are replaced from the source (model/unknowns.py).
"""

from __future__ import annotations

import logging
import random
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

SPECIAL_IDS = {"pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3}
# byte fallback takes 256 pieces (<0x00>..<0xFF>): below this size they would crowd out the subwords
MIN_BYTE_FALLBACK_VOCAB = 1024

log = logging.getLogger(__name__)


def train_tokenizer(
    texts: Iterable[str],
    out_path: str | Path,
    vocab_size: int,
    *,
    model_type: str = "unigram",
    control_symbols: Sequence[str] = (),
    character_coverage: float = 0.9995,
    max_sentences: int = 2_000_000,
    seed: int = 0,
    num_threads: int = 2,
    byte_fallback: bool = True,
    split_digits: bool = True,
) -> Path:
    """Write `<out_path>` (.model) trained on `texts`; control symbols ([CLS], <2en>) follow the 4 special ids.

    byte_fallback: on from MIN_BYTE_FALLBACK_VOCAB pieces only (tiny test vocabularies have no room)."""
    if byte_fallback and vocab_size < MIN_BYTE_FALLBACK_VOCAB:
        byte_fallback = False
        log.info("vocab_size %d < %d: no byte fallback", vocab_size, MIN_BYTE_FALLBACK_VOCAB)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lines = [t.replace("\n", " ").strip() for t in texts]
    lines = [t for t in lines if t]
    if len(lines) > max_sentences:
        lines = random.Random(seed).sample(lines, max_sentences)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(out_path.with_suffix("")),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            control_symbols=list(control_symbols),
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            num_threads=num_threads,
            minloglevel=2,
            hard_vocab_limit=False,  # tiny corpora (tests) may not support the full size
            byte_fallback=byte_fallback,
            split_digits=split_digits,
            **SPECIAL_IDS,
        )
    (out_path.with_suffix(".vocab")).unlink(missing_ok=True)
    return out_path.with_suffix(".model")

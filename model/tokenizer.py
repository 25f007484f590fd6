"""Thin wrapper over a sentencepiece model file (loaded from bytes: no pickle, no network)."""

from __future__ import annotations

from pathlib import Path

import sentencepiece as spm


class Tokenizer:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(self.path.read_bytes())
        except (RuntimeError, OSError) as e:  # sentencepiece raises RuntimeError on a bad proto
            raise ValueError(f"{self.path.name}: not a valid sentencepiece model ({e})") from e
        self.pad_id, self.unk_id = self.sp.pad_id(), self.sp.unk_id()
        self.bos_id, self.eos_id = self.sp.bos_id(), self.sp.eos_id()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids: list[int] = self.sp.encode(text, out_type=int)
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids: list[int]) -> str:
        """Ids -> text, skipping pad/bos/eos and other control symbols."""
        return self.sp.decode(ids)

    def pieces(self, ids: list[int]) -> list[str]:
        """Ids -> display pieces ("▁word" marks a word start)."""
        return [self.sp.id_to_piece(i) for i in ids]

    def piece_to_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)

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
        self.unk_surface: str = self.sp.decode([self.unk_id])  # what decode writes for <unk> (" ⁇ ")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids: list[int] = self.sp.encode(text, out_type=int)
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each piece's character span in `text` (an <unk> covers the characters it stands for)."""
        out = self.sp.encode(text, out_type="offset_mapping")
        return list(out["ids"]), [tuple(o) for o in out["offsets"]]

    def encodes_unknown(self, text: str) -> bool:
        """Whether `text` encodes with an <unk> (never, with byte fallback)."""
        return self.unk_id in self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids: list[int]) -> str:
        """Ids -> text, skipping pad/bos/eos and other control symbols."""
        return self.sp.decode(ids)

    def decode_marked(self, ids: list[int]) -> str:
        """`decode`: it writes each <unk> as unk_surface (model.unknowns replaces it)."""
        return self.sp.decode(ids)

    def pieces(self, ids: list[int]) -> list[str]:
        """Ids -> display pieces ("▁word" marks a word start)."""
        return [self.sp.id_to_piece(i) for i in ids]

    def piece_to_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)


class PairTokenizer:
    """Separate source and target sentencepiece models over one shared vocabulary (Marian / OPUS-MT):
    `encode` cuts with the source model and `decode` joins with the target model; ids come from `vocab`
    (piece -> id, vocab.json), not from either sentencepiece model. Same interface as Tokenizer."""

    def __init__(self, source: str | Path, target: str | Path, vocab: dict[str, int]) -> None:
        self.path, self.target_path = Path(source), Path(target)
        self.sp, self.target_sp = Tokenizer(source).sp, Tokenizer(target).sp
        ids = sorted(vocab.values())
        if ids != list(range(len(ids))):
            raise ValueError(f"vocabulary ids must be 0..{len(ids) - 1} without gaps or repeats")
        self.vocab = vocab
        self.id_to_piece = [""] * len(vocab)  # (V,)
        for piece, i in vocab.items():
            self.id_to_piece[i] = piece
        missing = [p for p in ("<pad>", "<unk>", "</s>") if p not in vocab]
        if missing:
            raise ValueError(f"vocabulary lacks the special pieces {missing}")
        self.pad_id, self.unk_id, self.eos_id = vocab["<pad>"], vocab["<unk>"], vocab["</s>"]
        # Marian has no BOS (its decoder starts from <pad>): a "<s>" in vocab.json (the tc-big releases) is an
        # ordinary piece, as transformers' MarianTokenizer treats it
        self.bos_id = self.pad_id
        self.special = {self.pad_id, self.unk_id, self.eos_id, self.bos_id}
        self.unk_surface: str = self.target_sp.decode_pieces(["<unk>"])  # what decode_marked writes (" ⁇ ")

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = [self.vocab.get(p, self.unk_id) for p in self.sp.encode(text, out_type=str)]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each piece's character span in `text` (Tokenizer.encode_with_offsets)."""
        out = self.sp.encode(text, out_type="offset_mapping")
        unk = self.sp.unk_id()
        ids = [
            self.unk_id if i == unk else self.vocab.get(p, self.unk_id)
            for i, p in zip(out["ids"], out["pieces"], strict=True)
        ]
        return ids, [tuple(o) for o in out["offsets"]]

    def encodes_unknown(self, text: str) -> bool:
        return self.unk_id in self.encode(text)

    def decode(self, ids: list[int]) -> str:
        """Ids -> text by the target model, without special pieces; a source-only piece's "▁" still becomes a
        space (as transformers' MarianTokenizer decodes with skip_special_tokens)."""
        pieces = [self.id_to_piece[i] for i in ids if i not in self.special]
        return self.target_sp.decode_pieces(pieces).replace("▁", " ").strip()

    def decode_marked(self, ids: list[int]) -> str:
        """`decode`, with each <unk> written as unk_surface (model.unknowns replaces it)."""
        pieces = [self.id_to_piece[i] for i in ids if i not in self.special or i == self.unk_id]
        return self.target_sp.decode_pieces(pieces).replace("▁", " ").strip()

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.id_to_piece[i] for i in ids]

    def piece_to_id(self, piece: str) -> int:
        return self.vocab.get(piece, self.unk_id)


class FairseqTokenizer(Tokenizer):
    """XLM-R's sentencepiece model with fairseq's ids, as transformers' XLMRobertaTokenizer maps them: <s> 0,
    <pad> 1, </s> 2, <unk> 3, sentencepiece piece i (i >= 3) -> i + 1, <mask> last. Same interface."""

    OFFSET = 1  # fairseq put <pad> at 1, shifting every sentencepiece id by one
    SPECIAL = ("<s>", "<pad>", "</s>", "<unk>")

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.sp_unk = self.sp.unk_id()
        self.bos_id, self.pad_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self.mask_id = self.sp.get_piece_size() + self.OFFSET

    @property
    def vocab_size(self) -> int:
        return self.mask_id + 1

    def _ids(self, sp_ids: list[int]) -> list[int]:
        return [self.unk_id if i == self.sp_unk else i + self.OFFSET for i in sp_ids]

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = self._ids(self.sp.encode(text, out_type=int))
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        out = self.sp.encode(text, out_type="offset_mapping")
        return self._ids(list(out["ids"])), [tuple(o) for o in out["offsets"]]

    def encodes_unknown(self, text: str) -> bool:
        return self.sp_unk in self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._ids(ids) for ids in self.sp.encode(texts, out_type=int)]

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode([i - self.OFFSET for i in ids if self.unk_id < i < self.mask_id])

    def decode_marked(self, ids: list[int]) -> str:
        return self.sp.decode(
            [
                self.sp_unk if i == self.unk_id else i - self.OFFSET
                for i in ids
                if i >= self.unk_id and i < self.mask_id
            ]
        )

    def pieces(self, ids: list[int]) -> list[str]:
        return [
            self.SPECIAL[i]
            if i < len(self.SPECIAL)
            else "<mask>"
            if i == self.mask_id
            else self.sp.id_to_piece(i - self.OFFSET)
            for i in ids
        ]

    def piece_to_id(self, piece: str) -> int:
        if piece in self.SPECIAL:
            return self.SPECIAL.index(piece)
        i = self.sp.piece_to_id(piece)
        return self.unk_id if i == self.sp_unk else i + self.OFFSET

"""Hashed bag of n-grams: the features and linear head of a classifier's optional "wide" part.

Word 1..W-grams and character 1..C-grams of a text are hashed into `buckets` rows of a (buckets, classes)
table and summed (fastText / NBSVM family; Wide & Deep, Cheng et al. 2016). It errs on other texts than the
Transformer, so adding its logits to the Transformer's scores better than either alone on NSMC and IMDb
valid (BENCHMARKS.md). Per text, Python only splits words and takes one crc32 per word (`ngram_text`); the
n-gram hashing is tensor arithmetic over many texts at once (`hash_units`, TorchScript: the server runs it inside
the classifier's one graph call, without the GIL).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import torch
from torch import Tensor, nn

from model.config import NgramSpec
from model.ngram_text import NgramText, ngram_text
from model.script import script

# texts hashed at once when there are many: bounded memory (a long review has thousands of n-grams)
CHUNK = 1024


# The hash is defined on uint64 values (tests/model/test_ngram.py spells it out in Python ints). Torch has no
# uint64 arithmetic on CPU, so it runs on int64 tensors holding the same 64 bits: two's-complement + and *
# wrap mod 2^64 exactly as uint64's do, bit for bit. Only the operations that read the sign bit differ, and
# are rewritten: a right shift masks off the copies of the sign bit (_shr), and a modulo takes the uint64
# value as 2 * (h >>> 1) + (h & 1) (_mod).


def _int64(u: int) -> int:
    """The int64 with the bits of uint64 u."""
    u &= (1 << 64) - 1
    return u - (1 << 64) if u >= 1 << 63 else u


ROLL = _int64(0x9E3779B97F4A7C15)  # rolling-hash multiplier: odd, 2^64 / golden ratio
SALT = 0xD6E8FEB86659FD93  # n-grams of (kind, order n) are salted by (kind * 10 + n + 1) * SALT
MIX1, MIX2 = _int64(0xBF58476D1CE4E5B9), _int64(0x94D049BB133111EB)  # splitmix64's finalizer multipliers
# (kind, n) -> salt for kind 0 (word n-grams) and 1 (character n-grams), orders n = 1..9 (the spec's digits)
SALTS = torch.tensor([[_int64((kind * 10 + n + 1) * SALT) for n in range(10)] for kind in range(2)])


def text_units(texts: Sequence[str | NgramText], device: torch.device | str = "cpu") -> list[Tensor]:
    """[words (U,) crc32 of each word, words per text (N,), code points (P,) of each text's ' '-padded,
    space-joined words, code points per text (N,)]: the hashing's input, all int64, texts back to back.
    A text given as its NgramText skips the per-text half: what is left is a few whole-batch copies."""
    parts = [t if type(t) is NgramText else ngram_text(t) for t in texts]  # type: ignore[arg-type]
    counts = np.fromiter((len(p.words) for p in parts), dtype=np.int64, count=len(parts))
    words = np.fromiter(chain.from_iterable(p.words for p in parts), dtype=np.int64, count=int(counts.sum()))
    utf32 = bytearray("".join(p.padded for p in parts).encode("utf-32-le", "surrogatepass"))
    points = torch.frombuffer(utf32, dtype=torch.int32) if utf32 else torch.zeros(0, dtype=torch.int32)
    return [
        torch.from_numpy(words).to(device),
        torch.from_numpy(counts).to(device),
        points.to(device=device, dtype=torch.long),
        torch.tensor([len(p.padded) for p in parts], dtype=torch.long, device=device),
    ]


# TorchScript reads no global ints: the scripted functions below take the constants as default arguments.


@script
def _shr(h: Tensor, k: int) -> Tensor:
    """Logical (uint64) right shift of int64 bits, 1 <= k < 64: the low 64 - k bits of the arithmetic shift."""
    return (h >> k) & (9223372036854775807 >> (k - 1))  # (2^63 - 1) >> (k - 1)


@script
def _mod(h: Tensor, m: int) -> Tensor:
    """The uint64 value of int64 bits h, mod m (1 <= m < 2^62)."""
    return (_shr(h, 1) % m * 2 + (h & 1)) % m


@script
def _mix(h: Tensor, mix1: int = MIX1, mix2: int = MIX2) -> Tensor:
    """splitmix64's finalizer: every input bit reaches every output bit."""
    h = (h ^ _shr(h, 30)) * mix1
    h = (h ^ _shr(h, 27)) * mix2
    return h ^ _shr(h, 31)


@script
def _orders(
    units: Tensor,
    counts: Tensor,
    max_order: int,
    salts: Tensor,
    hashes: list[Tensor],
    rows: list[Tensor],
    roll: int = ROLL,
) -> None:
    """Append (hashes, rows) of all 1..max_order-grams of the texts' units (back to back, `counts` per text),
    salted per order: an n-gram is a rolling hash over n consecutive units of one text."""
    ends = torch.repeat_interleave(torch.cumsum(counts, 0), counts)  # (U,) the end of each unit's text
    row = torch.repeat_interleave(torch.arange(counts.numel(), device=units.device), counts)
    start = torch.arange(units.numel(), device=units.device)
    h = units
    for n in range(1, max_order + 1):
        if n > 1:
            h = h[:-1] * roll + units[n - 1 :]  # (U - n + 1,) the n-grams starting at each unit
        inside = start[: h.numel()] + n <= ends[: h.numel()]  # within one text
        hashes.append(h[inside] + salts[n])
        rows.append(row[: h.numel()][inside])


@script
def hash_units(
    units: list[Tensor], words: int, chars: int, buckets: int, salts: Tensor
) -> tuple[Tensor, Tensor]:
    """text_units -> (ids, lengths): each text's sorted distinct bucket ids, back to back, and how many it
    has. `words`/`chars`: the spec's orders; `salts`: SALTS (on the units' device)."""
    n_texts = units[1].numel()
    hashes: list[Tensor] = []
    rows: list[Tensor] = []
    _orders(units[0], units[1], words, salts[0], hashes, rows)
    if chars > 0:
        _orders(units[2], units[3], chars, salts[1], hashes, rows)
    h = _mod(_mix(torch.cat(hashes)), buckets)
    keys = torch.sort(torch.cat(rows) * buckets + h).values  # by text, then bucket
    keep = torch.ones_like(keys, dtype=torch.bool)
    keep[1:] = keys[1:] != keys[:-1]
    keys = keys[keep]  # distinct
    return keys % buckets, torch.bincount(keys // buckets, minlength=n_texts)


def hash_texts(
    texts: Sequence[str], spec: NgramSpec, buckets: int, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """(ids, lengths) as hash_units: each text's sorted distinct bucket ids (int64), and how many it has."""
    units = text_units(texts, device)
    return hash_units(units, spec.words, spec.chars, buckets, SALTS.to(device))


def features(text: str, spec: NgramSpec, buckets: int) -> list[int]:
    """Sorted distinct bucket ids of one text's word and character n-grams."""
    return hash_texts([text], spec, buckets)[0].tolist()


def offsets(lengths: Tensor) -> Tensor:
    """nn.EmbeddingBag offsets (N,) of bags of the given lengths laid back to back."""
    return torch.cumsum(lengths, 0) - lengths


def bags(
    texts: Sequence[str], spec: NgramSpec, buckets: int, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """(ids, offsets) of the texts' n-grams for nn.EmbeddingBag."""
    ids, lengths = hash_texts(texts, spec, buckets, device)
    return ids, offsets(lengths)


class NgramHead(nn.Module):
    """Linear model over hashed n-grams: bags (ids, offsets) -> logits (B, C). With its spec it also hashes
    text_units into the (ids, lengths) the bags are made of (`hash`)."""

    def __init__(
        self, buckets: int, classes: int, spec: NgramSpec | None = None, sparse: bool = False
    ) -> None:
        super().__init__()
        # zeros given as the weight: the layer's own random init of buckets x classes rows is skipped
        self.table = nn.EmbeddingBag(
            buckets, classes, mode="sum", sparse=sparse, _weight=torch.zeros(buckets, classes)
        )
        self.bias = nn.Parameter(torch.zeros(classes))
        self.buckets = buckets
        self.words, self.chars = (spec.words, spec.chars) if spec is not None else (0, 0)
        self.register_buffer("salts", SALTS.clone(), persistent=False)  # follows the head's device

    def forward(self, ids: Tensor, offsets: Tensor) -> Tensor:
        return self.table(ids, offsets) + self.bias

    def hash(self, units: list[Tensor]) -> tuple[Tensor, Tensor]:
        """text_units of B texts -> (ids, lengths) as hash_units, with this head's spec and buckets."""
        assert self.words > 0, "hashing needs the head's n-gram spec"
        return hash_units(units, self.words, self.chars, self.buckets, self.salts)

"""Hashed bag of n-grams: the features and linear head of a classifier's optional "wide" part.

Word 1..W-grams and character 1..C-grams of a text are hashed into `buckets` rows of a (buckets, classes)
table and summed (fastText / NBSVM family; Wide & Deep, Cheng et al. 2016). It errs on other texts than the
Transformer, so adding its logits to the Transformer's is ~1 point better than either alone on NSMC and
IMDb valid. The hash is numpy arithmetic over code points and word hashes, batched over texts (no Python
loop per n-gram), so the head costs little next to the encoder.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

CHUNK = 1024  # texts hashed at once when there are many: a long review has ~7,000 n-grams
_SPEC = re.compile(r"w(\d)c(\d)")
_WORD = re.compile(r"\w+|[^\w\s]")
_MUL = np.uint64(0x9E3779B97F4A7C15)  # the rolling hash's multiplier (odd, 2^64 / golden ratio)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64 finalizer
# salt of (kind, order): word n-grams and character n-grams of each order hash apart
_SALTS = (np.arange(2 * 10, dtype=np.uint64).reshape(2, 10) + np.uint64(1)) * np.uint64(0xD6E8FEB86659FD93)


@dataclass(frozen=True)
class NgramSpec:
    words: int  # word n-grams of order 1..words
    chars: int  # character n-grams of order 1..chars (0 = none), over the space-joined words

    @staticmethod
    @functools.cache  # parsed once per spec string (the server parses it per batch)
    def parse(spec: str) -> NgramSpec:
        """'w3c4' -> NgramSpec(3, 4); ValueError naming the format otherwise."""
        m = _SPEC.fullmatch(spec)
        if not m or int(m[1]) < 1:
            raise ValueError(f"n-gram spec {spec!r} is not 'wWcC' (word orders 1..W >= 1, char orders 1..C)")
        return NgramSpec(int(m[1]), int(m[2]))

    def __str__(self) -> str:
        return f"w{self.words}c{self.chars}"


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, in place: every input bit reaches every bucket bit (uint64, wrapping)."""
    h ^= h >> np.uint64(30)
    h *= _M1
    h ^= h >> np.uint64(27)
    h *= _M2
    h ^= h >> np.uint64(31)
    return h


def _orders(
    units: np.ndarray, ends: np.ndarray, rows: np.ndarray, max_order: int, kind: int, out: list
) -> None:
    """Append (hashes, rows) of all 1..max_order-grams of concatenated segments, salted by kind and order.

    units (U,) uint64: the segments back to back; ends (U,): the end of each unit's segment; rows (U,): its
    text. An n-gram is a rolling hash over n consecutive units that stay inside one segment.
    """
    h, start = units, np.arange(len(units))
    for n in range(1, max_order + 1):
        if n > 1:
            h = h[:-1] * _MUL + units[n - 1 :]
        inside = start[: len(h)] + n <= ends[: len(h)]
        out.append((h[inside] + _SALTS[kind, n], rows[: len(h)][inside]))


def _segments(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(ends, rows) per unit of segments of the given lengths laid back to back."""
    counts = np.array(lengths, dtype=np.int64)
    return np.repeat(np.cumsum(counts), counts), np.repeat(np.arange(len(counts)), counts)


def hash_texts(texts: Sequence[str], spec: NgramSpec, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, lengths): each text's sorted distinct bucket ids (int64), back to back, and how many it has.

    One pass of ~40 numpy calls for the whole batch (per text only the regex, lower-casing and one crc32 per
    word run in Python): ~16 us per short text in batches of 32, and the same ids whatever the batch.
    """
    tokens = [_WORD.findall(t.lower().replace("<br />", " ")) for t in texts]
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    # surrogatepass: a lone surrogate (valid JSON "\\ud800") hashes instead of failing the whole batch
    words = np.array([zlib.crc32(w.encode("utf-8", "surrogatepass")) for ws in tokens for w in ws], np.uint64)
    _orders(words, *_segments([len(ws) for ws in tokens]), spec.words, 0, parts)
    if spec.chars:
        padded = [f" {' '.join(ws)} " for ws in tokens]
        joined = "".join(padded).encode("utf-32-le", "surrogatepass")
        points = np.frombuffer(joined, dtype=np.uint32).astype(np.uint64)
        _orders(points, *_segments([len(p) for p in padded]), spec.chars, 1, parts)
    hashes = _mix(np.concatenate([h for h, _ in parts])) % np.uint64(buckets)
    rows = np.concatenate([r for _, r in parts])
    keys = np.sort(rows * buckets + hashes.astype(np.int64))  # by text, then bucket
    keys = keys[np.r_[True, keys[1:] != keys[:-1]][: len(keys)]]  # distinct (np.unique: ~6x slower here)
    return keys % buckets, np.bincount(keys // buckets, minlength=len(texts))


def features(text: str, spec: NgramSpec, buckets: int) -> np.ndarray:
    """Sorted distinct bucket ids (int64) of one text's word and character n-grams."""
    return hash_texts([text], spec, buckets)[0]


def bags(
    texts: Sequence[str], spec: NgramSpec, buckets: int, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """(ids, offsets) of the texts' n-grams for nn.EmbeddingBag."""
    ids, lengths = hash_texts(texts, spec, buckets)
    offsets = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return torch.from_numpy(ids).to(device), torch.from_numpy(offsets).to(device)


class NgramHead(nn.Module):
    """Linear model over hashed n-grams: (ids, offsets) -> logits (B, C)."""

    def __init__(self, buckets: int, classes: int, sparse: bool = False) -> None:
        super().__init__()
        # zeros given as the weight: the layer's own random init of buckets x classes rows is skipped
        self.table = nn.EmbeddingBag(
            buckets, classes, mode="sum", sparse=sparse, _weight=torch.zeros(buckets, classes)
        )
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, ids: Tensor, offsets: Tensor) -> Tensor:
        return self.table(ids, offsets) + self.bias

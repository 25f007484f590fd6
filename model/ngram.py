"""Hashed bag of n-grams: the features and linear head of a classifier's optional "wide" part.

Word 1..W-grams and character 1..C-grams of a text are hashed into `buckets` rows of a (buckets, classes)
table and summed (fastText / NBSVM family; Wide & Deep, Cheng et al. 2016). It errs on other texts than the
Transformer, so adding its logits to the Transformer's is ~1 point better than either alone on NSMC and
IMDb valid. The hash is numpy arithmetic over code points and word hashes (no Python loop per n-gram):
~0.1 ms for a 1,200-character review, so the head costs little next to the encoder.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

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


def _orders(units: np.ndarray, max_order: int, kind: int, out: list[np.ndarray]) -> None:
    """Append the rolling hashes of all 1..max_order-grams of `units` (uint64), salted by kind and order."""
    h = units
    for n in range(1, min(max_order, len(units)) + 1):
        if n > 1:
            h = h[:-1] * _MUL + units[n - 1 :]
        out.append(h + _SALTS[kind, n])


def features(text: str, spec: NgramSpec, buckets: int) -> np.ndarray:
    """Sorted distinct bucket ids (int64) of a text's word and character n-grams.

    ~40 numpy calls whatever the length (one mix over all orders at once): ~0.1 ms for a short text.
    """
    words = _WORD.findall(text.lower().replace("<br />", " "))
    parts: list[np.ndarray] = []
    _orders(np.array([zlib.crc32(w.encode()) for w in words], dtype=np.uint64), spec.words, 0, parts)
    if spec.chars:
        points = np.frombuffer(f" {' '.join(words)} ".encode("utf-32-le"), dtype=np.uint32)
        _orders(points.astype(np.uint64), spec.chars, 1, parts)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.unique(_mix(np.concatenate(parts)) % np.uint64(buckets)).astype(np.int64)


def bags(rows: Sequence[np.ndarray], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """(ids, offsets) for nn.EmbeddingBag from per-text feature arrays."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    ids = np.concatenate(rows) if len(rows) else np.zeros(0, dtype=np.int64)
    return torch.from_numpy(ids).to(device), torch.from_numpy(offsets).to(device)


class NgramHead(nn.Module):
    """Linear model over hashed n-grams: (ids, offsets) -> logits (B, C)."""

    def __init__(self, buckets: int, classes: int, sparse: bool = False) -> None:
        super().__init__()
        self.table = nn.EmbeddingBag(buckets, classes, mode="sum", sparse=sparse)
        nn.init.zeros_(self.table.weight)
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, ids: Tensor, offsets: Tensor) -> Tensor:
        return self.table(ids, offsets) + self.bias

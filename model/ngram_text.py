"""The per-text half of the n-gram head's input (model/ngram.py): a text's words and their crc32s, in plain
Python (no torch), so that a server's HTTP processes, which never import torch, run it where they tokenize."""

from __future__ import annotations

import re
import zlib
from typing import NamedTuple

_WORD = re.compile(r"\w+|[^\w\s]")


class NgramText(NamedTuple):
    """One text as the hashing reads it (`ngram_text`): the per-text Python half of `text_units`, which a
    server runs where the text is tokenized, off the thread that runs the batch."""

    words: list[int]  # crc32 of each word
    padded: str  # the words ' '-padded and space-joined: its code points are the character units


NO_NGRAM = NgramText([], "")  # what a classifier without an n-gram head carries in its place


def ngram_text(text: str) -> NgramText:
    tokens = _WORD.findall(text.lower().replace("<br />", " "))
    # surrogatepass: a lone surrogate (valid JSON "\\ud800") hashes instead of failing the whole batch
    words = [zlib.crc32(w.encode("utf-8", "surrogatepass")) for w in tokens]
    return NgramText(words, f" {' '.join(tokens)} ")

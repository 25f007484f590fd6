"""Dataset readers for the files under the data directory (layout: ``shared/data/README.md``)."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypeVar

DATA_DIR_ENV = "TRAINING_DATA_DIR"
HOLDOUT_SEED = 0
HOLDOUT_FRACTION = 0.05
_NSMC_QUOTE_LEVELS = 2  # the official files went through pandas.to_csv twice
_T = TypeVar("_T")
_BR = re.compile(r"(?:\s*<br\s*/?>\s*)+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class LabeledText:
    text: str
    label: int


@dataclass(frozen=True, slots=True)
class Pair:
    src: str
    tgt: str


def resolve_data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """``--data-dir`` > ``$TRAINING_DATA_DIR`` > ``<repo root>/../shared/data``."""
    if override is not None and str(override):
        return Path(override).expanduser()
    if env := os.environ.get(DATA_DIR_ENV):
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} not found: pass --data-dir DIR or set ${DATA_DIR_ENV} to the directory holding the datasets"
    )


def _open_text(path: Path) -> TextIO:
    if not path.is_file():
        raise _missing(path)
    # newline="\n": split on \n only (a stray \r or U+0085 stays inside its line)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return path.open(encoding="utf-8", newline="\n")


def _lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without its terminator)."""
    with _open_text(Path(path)) as f:
        for lineno, line in enumerate(f, 1):
            yield lineno, line.rstrip("\r\n")


def _rows(path: str | os.PathLike[str], header: tuple[str, ...] | None) -> Iterator[tuple[int, list[str]]]:
    """Yield tab-split rows; check the header (if given) and the column count of every row."""
    lines = _lines(path)
    if header is not None:
        first = next(lines, None)
        if first is None or tuple(first[1].split("\t")) != header:
            got = "empty file" if first is None else repr(first[1][:80])
            raise ValueError(f"{path}:1: expected header {'<TAB>'.join(header)!r}, got {got}")
    for lineno, line in lines:
        fields = line.split("\t")
        if header is not None and len(fields) != len(header):
            raise ValueError(
                f"{path}:{lineno}: expected {len(header)} tab-separated fields, got {len(fields)}"
            )
        yield lineno, fields


def _label(value: str, path: str | os.PathLike[str], lineno: int) -> int:
    if value not in ("0", "1"):
        raise ValueError(f"{path}:{lineno}: label must be 0 or 1, got {value!r}")
    return int(value)


def _unquote_once(field: str) -> str | None:
    """Invert one csv QUOTE_MINIMAL quoting, or None if ``field`` is not such a quoted field."""
    if len(field) < 2 or field[0] != '"' or field[-1] != '"':
        return None
    inner = field[1:-1]
    if '"' in inner.replace('""', ""):  # a quote run of odd length: not doubled-quote CSV
        return None
    return inner.replace('""', '"')


def unquote_nsmc(field: str) -> str:
    """Undo the two quoting levels of an NSMC document; fields not quoted exactly twice stay as stored."""
    text = field
    for _ in range(_NSMC_QUOTE_LEVELS):
        unquoted = _unquote_once(text)
        if unquoted is None:
            return field
        text = unquoted
    return text


def read_nsmc(path: str | os.PathLike[str], *, skip_empty: bool = False) -> list[LabeledText]:
    """Read an NSMC ``ratings_*.tsv`` file (``id, document, label``)."""
    out = []
    for lineno, (_, doc, label) in _rows(path, ("id", "document", "label")):
        text = unquote_nsmc(doc) if '"' in doc else doc
        if text or not skip_empty:
            out.append(LabeledText(text, _label(label, path, lineno)))
    return out


def read_imdb(path: str | os.PathLike[str]) -> list[LabeledText]:
    """Read an IMDb ``.tsv``/``.tsv.gz`` file (``text, label``); ``<br />`` tags become one space."""
    return [
        LabeledText(_BR.sub(" ", text).strip(), _label(label, path, lineno))
        for lineno, (text, label) in _rows(path, ("text", "label"))
    ]


@dataclass(frozen=True, slots=True)
class ProbeText:
    text: str
    label: int
    kind: str  # what the text tests, e.g. "negation"


def read_probe(path: str | os.PathLike[str], labels: Sequence[str]) -> list[ProbeText]:
    """A hand-labelled probe set (training/probes/*.jsonl): one JSON object a line, with "text", "label" (one
    of `labels`, the classifier's) and "kind"; the label becomes its index in `labels`."""
    out = []
    for lineno, line in _lines(path):
        try:
            row = json.loads(line)
            out.append(ProbeText(row["text"], labels.index(row["label"]), row["kind"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"{path}:{lineno}: not a probe row (text, label in {list(labels)}, kind): {e}"
            ) from e
    return out


def read_text_lines(path: str | os.PathLike[str]) -> list[str]:
    """One text per line (plain or .gz); empty lines are dropped."""
    return [line for _, line in _lines(path) if line]


def read_tsv_pairs(path: str | os.PathLike[str], src_lang: str, tgt_lang: str) -> list[Pair]:
    """Read a two-column TSV whose header names the languages (e.g. ``en<TAB>fr``)."""
    lines = _lines(path)
    first = next(lines, None)
    header = first[1].split("\t") if first else []
    if len(header) != 2 or not {src_lang, tgt_lang} <= set(header) or src_lang == tgt_lang:
        raise ValueError(
            f"{path}:1: header {header!r} does not name the languages {src_lang!r} and {tgt_lang!r}"
        )
    i, j = header.index(src_lang), header.index(tgt_lang)
    out = []
    for lineno, line in lines:
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{path}:{lineno}: expected 2 tab-separated fields, got {len(fields)}")
        out.append(Pair(fields[i], fields[j]))
    return out


def read_manythings(
    path: str | os.PathLike[str], src_lang: str, tgt_lang: str, other_lang: str
) -> list[Pair]:
    """Read a raw manythings.org file: no header, English, ``other_lang``, optional attribution (ignored).

    Blank lines are skipped (this is an upstream file, not one of ours).
    """
    langs = ("en", other_lang)
    if src_lang not in langs or tgt_lang not in langs or src_lang == tgt_lang:
        raise ValueError(
            f"src/tgt must be 'en' and {other_lang!r} in some order, got {src_lang!r}, {tgt_lang!r}"
        )
    i, j = langs.index(src_lang), langs.index(tgt_lang)
    out = []
    for lineno, line in _lines(path):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            raise ValueError(f"{path}:{lineno}: expected 2 or 3 tab-separated fields, got {len(fields)}")
        out.append(Pair(fields[i], fields[j]))
    return out


def read_parallel(src_path: str | os.PathLike[str], tgt_path: str | os.PathLike[str]) -> list[Pair]:
    """Read two line-aligned files (line i of one translates line i of the other)."""
    src = [line for _, line in _lines(src_path)]
    tgt = [line for _, line in _lines(tgt_path)]
    if len(src) != len(tgt):
        raise ValueError(
            f"parallel files are not aligned: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return [Pair(s, t) for s, t in zip(src, tgt, strict=True)]


def holdout(rows: list[_T], split: str) -> list[_T]:
    """Deterministic 5% validation holdout: ``valid`` gets it, ``train`` the rest (file order kept)."""
    order = list(range(len(rows)))
    random.Random(HOLDOUT_SEED).shuffle(order)
    n_valid = max(1, round(len(rows) * HOLDOUT_FRACTION)) if rows else 0
    valid = set(order[:n_valid])
    return [row for i, row in enumerate(rows) if (i in valid) == (split == "valid")]


_TRAIN_VALID_TEST = ("train", "valid", "test")
_TATOEBA_DIRS = {"fr": "fra-eng", "es": "spa-eng"}


def _nsmc(d: Path, split: str) -> list[LabeledText]:
    if split == "test":
        return read_nsmc(d / "nsmc" / "ratings_test.tsv")
    return holdout(read_nsmc(d / "nsmc" / "ratings_train.tsv", skip_empty=True), split)


def _imdb(d: Path, split: str) -> list[LabeledText]:
    if split == "test":
        return read_imdb(d / "imdb" / "test.tsv")
    return holdout(read_imdb(d / "imdb" / "train.tsv.gz"), split)


def _tatoeba(src: str, tgt: str) -> Callable[[Path, str], list[Pair]]:
    other = tgt if src == "en" else src
    return lambda d, split: read_tsv_pairs(d / "tatoeba" / _TATOEBA_DIRS[other] / f"{split}.tsv", src, tgt)


def _multi30k(src: str, tgt: str) -> Callable[[Path, str], list[Pair]]:
    return lambda d, split: read_parallel(
        d / "multi30k" / f"{split}.{src}", d / "multi30k" / f"{split}.{tgt}"
    )


_LOADERS: dict[str, tuple[tuple[str, ...], Callable[[Path, str], list]]] = {
    "nsmc": (_TRAIN_VALID_TEST, _nsmc),
    "nsmc-unlabeled": (("train",), lambda d, _: read_text_lines(d / "nsmc" / "unlabeled.txt.gz")),
    "imdb": (_TRAIN_VALID_TEST, _imdb),
    # the review texts of the imdb train split, unlabeled: in-domain masked-LM text that leaves valid/test out
    "imdb-text": (("train",), lambda d, _: [x.text for x in _imdb(d, "train")]),
    "tatoeba-fr-en": (_TRAIN_VALID_TEST, _tatoeba("fr", "en")),
    "tatoeba-es-en": (_TRAIN_VALID_TEST, _tatoeba("es", "en")),
    "tatoeba-en-fr": (_TRAIN_VALID_TEST, _tatoeba("en", "fr")),
    "tatoeba-en-es": (_TRAIN_VALID_TEST, _tatoeba("en", "es")),
    "multi30k-de-en": (_TRAIN_VALID_TEST, _multi30k("de", "en")),
    "multi30k-en-de": (_TRAIN_VALID_TEST, _multi30k("en", "de")),
}
DATASETS: tuple[str, ...] = tuple(_LOADERS)


def splits(dataset: str) -> tuple[str, ...]:
    """The splits load_split reads for a dataset: train, valid, test, or only train for unlabeled text."""
    return _LOADERS[dataset][0]


def load_split(
    dataset: str, split: str, data_dir: Path | None = None
) -> list[LabeledText] | list[Pair] | list[str]:
    """Load one split of a dataset (``DATASETS``) from ``data_dir`` (default: ``resolve_data_dir()``).

    Returns:
        ``LabeledText`` rows (nsmc, imdb), ``Pair`` rows (translation, ``src -> tgt`` as in the
        name) or plain strings (nsmc-unlabeled, imdb-text).
    """
    if dataset not in _LOADERS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    splits, loader = _LOADERS[dataset]
    if split not in splits:
        raise ValueError(f"unknown split {split!r} for {dataset}; choose one of {', '.join(splits)}")
    return loader(resolve_data_dir() if data_dir is None else Path(data_dir), split)

"""Fetch the datasets from their public sources and convert them into the layout ``training.data`` reads.

Downloads go to ``<data dir>/downloads/`` (resumable ``.part`` files, sha256-checked), conversions write
``nsmc/``, ``imdb/``, ``tatoeba/`` and ``multi30k/`` next to it. Differences from the shared copy:
imdb ``test.tsv`` holds all 25,000 official test reviews (the shared copy withholds 5,000, a split that is
not public), and the tatoeba splits are made here with ``SPLIT_SEED`` from every source pair.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.client
import logging
import random
import re
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

from training.data import DATA_DIR_ENV, Pair, read_manythings, resolve_data_dir

log = logging.getLogger(__name__)

SPLIT_SEED = 20190407  # tatoeba group shuffle (the fra-eng release date); the shared copy's seed is withheld
TATOEBA_VALID, TATOEBA_TEST = 2_000, 3_000
_CHUNK = 1 << 16


class DownloadError(RuntimeError):
    """A file could not be fetched, or failed its sha256 check."""


@dataclass(frozen=True, slots=True)
class Source:
    """One file to fetch into ``<data dir>/<filename>``; ``sha256=None``: not published, the outputs are checked."""

    url: str
    filename: str
    sha256: str | None = None
    size: int | None = None


Converter = Callable[[list[Path], Path], None]  # (downloaded files, data dir) -> writes the layout


@dataclass(frozen=True, slots=True)
class Dataset:
    """Sources, a conversion step, and the files it must produce as ``(path, sha256 or None)``.

    A known output hash is verified after conversion; that is how a source without a published hash
    (multi30k's .gz files) is still checked end to end.
    """

    sources: tuple[Source, ...]
    outputs: tuple[tuple[str, str | None], ...]
    convert: Converter | None = None


# --- download ------------------------------------------------------------------------------------


def sha256sum(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def mirrored(url: str, mirror: str | None) -> str:
    """``url`` with everything up to its file name replaced by ``mirror`` (if given)."""
    return url if not mirror else f"{mirror.rstrip('/')}/{url.rsplit('/', 1)[1]}"


def _offline(url: str, data_dir: Path, reason: object) -> DownloadError:
    return DownloadError(
        f"could not reach {urlsplit(url).netloc} ({reason}) for {url}. Without internet access, copy the "
        f"dataset files into {data_dir} by hand (same layout as shared/data), or use --mirror URL."
    )


def _stream(url: str, part: Path, data_dir: Path, timeout: float, size: int | None) -> None:
    """Append the rest of ``url`` to ``part``, resuming with a Range request when it already has bytes."""
    offset = part.stat().st_size if part.exists() else 0
    request = Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urlopen(request, timeout=timeout)
    except HTTPError as err:
        err.close()
        if err.code == 416 and offset:  # nothing left to send: the .part is complete, the hash decides
            return
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from None
    except OSError as err:  # URLError: DNS failure, refused connection; or a timeout
        raise _offline(url, data_dir, getattr(err, "reason", err)) from err
    with response:
        if offset and response.status != 206:
            log.info("%s: server ignored the range request, starting over", part.name)
            offset = 0
        elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
            raise DownloadError(f"{url}: unexpected Content-Range {response.headers.get('Content-Range')!r}")
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length else size
        done, step = offset, 0
        try:
            with part.open("ab" if offset else "wb") as f:
                while chunk := response.read(_CHUNK):
                    f.write(chunk)
                    done += len(chunk)
                    if total and done * 10 // total > step:
                        step = done * 10 // total
                        log.info("%s: %d%% of %.1f MB", part.name[:-5], 10 * step, total / 1e6)
        except (OSError, http.client.HTTPException) as err:
            raise DownloadError(
                f"download of {url} interrupted ({err}); run the command again to resume"
            ) from err


def fetch(src: Source, data_dir: Path, *, mirror: str | None = None, timeout: float = 60.0) -> Path:
    """Download ``src`` into ``data_dir`` unless it is already there with the right sha256."""
    dest = data_dir / src.filename
    url = mirrored(src.url, mirror)
    if dest.is_file():
        if src.sha256 is None or sha256sum(dest) == src.sha256:
            log.info("%s: already present", dest)
            return dest
        log.warning("%s: wrong sha256, downloading it again", dest)
        dest.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    log.info("fetching %s", url)
    _stream(url, part, data_dir, timeout, src.size)
    actual = sha256sum(part)
    if src.sha256 is not None and actual != src.sha256:
        part.unlink()
        raise DownloadError(f"sha256 mismatch for {url}: expected {src.sha256}, got {actual} (file deleted)")
    part.replace(dest)
    return dest


# --- conversion ----------------------------------------------------------------------------------


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _write_tsv(path: Path, rows: Iterable[Sequence[str]]) -> None:
    data = "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")
    _write_atomic(path, gzip.compress(data, compresslevel=9, mtime=0) if path.suffix == ".gz" else data)


_IMDB_MEMBER = re.compile(r"aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt")
_IMDB_SPACES = str.maketrans({"\t": " ", "\x85": " ", "\r": " ", "\n": " "})  # keep one review per TSV line


def convert_imdb(downloads: list[Path], data_dir: Path) -> None:
    """aclImdb_v1.tar.gz -> ``imdb/train.tsv.gz`` + ``imdb/test.tsv`` (order as in imdb/SOURCE.md)."""
    rows: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}
    # stream mode: members are read in order from the archive; nothing is extracted to disk
    with tarfile.open(downloads[0], mode="r|gz") as tar:
        for member in tar:
            m = _IMDB_MEMBER.fullmatch(member.name)
            f = tar.extractfile(member) if m and member.isfile() else None
            if m and f is not None:
                rows[m[1]].append(
                    (int(m[2] == "pos"), int(m[3]), f.read().decode("utf-8").translate(_IMDB_SPACES))
                )
    for split, seed, name in (("train", 0, "train.tsv.gz"), ("test", 1, "test.tsv")):
        if not rows[split]:
            raise DownloadError(f"{downloads[0]}: no aclImdb/{split}/{{pos,neg}} reviews in the archive")
        ordered = sorted(rows[split], key=lambda r: (-r[0], r[1]))
        random.Random(seed).shuffle(ordered)
        _write_tsv(data_dir / "imdb" / name, [("text", "label"), *((t, str(y)) for y, _, t in ordered)])


def group_pairs(pairs: Sequence[Pair]) -> list[list[int]]:
    """Indices of pairs linked by any identical string (either column), grouped; groups by first occurrence."""
    parent = list(range(len(pairs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, pair in enumerate(pairs):
        for text in (pair.src, pair.tgt):
            parent[find(i)] = find(first.setdefault(text, i))
    groups: dict[int, list[int]] = {}
    for i in range(len(pairs)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def split_pairs(
    pairs: Sequence[Pair], n_valid: int = TATOEBA_VALID, n_test: int = TATOEBA_TEST, seed: int = SPLIT_SEED
) -> dict[str, list[Pair]]:
    """Leakage-free split: shuffled groups fill test, then valid, when they fit; the rest is train."""
    groups = group_pairs(pairs)
    random.Random(seed).shuffle(groups)
    left = {"test": n_test, "valid": n_valid}
    split_of = [""] * len(pairs)
    for group in groups:
        split = next((s for s, n in left.items() if len(group) <= n), "train")
        if split != "train":
            left[split] -= len(group)
        for i in group:
            split_of[i] = split
    if left["test"] or left["valid"]:
        log.warning("tatoeba quotas not filled: %s pairs short", left)
    return {
        s: [p for p, t in zip(pairs, split_of, strict=True) if t == s] for s in ("train", "valid", "test")
    }


def convert_manythings(
    downloads: list[Path],
    data_dir: Path,
    *,
    member: str,
    lang: str,
    n_valid: int = TATOEBA_VALID,
    n_test: int = TATOEBA_TEST,
    seed: int = SPLIT_SEED,
) -> None:
    """``{fra,spa}-eng.zip`` -> ``tatoeba/<dir>/{pairs,train,valid,test}.tsv`` with header ``en<TAB>lang``."""
    out = data_dir / "tatoeba" / member.split("/")[0]
    with zipfile.ZipFile(downloads[0]) as zf, tempfile.TemporaryDirectory() as tmp:
        names = zf.namelist()
        if member not in names:
            raise DownloadError(f"{downloads[0]} has no member {member!r}")
        raw = Path(tmp) / Path(member).name
        raw.write_bytes(zf.read(member))
        pairs = list(dict.fromkeys(read_manythings(raw, "en", lang, lang)))  # drop exact duplicates
        about = f"{member.split('/')[0]}/_about.txt"  # the attribution terms shipped with the release
        if about in names:
            _write_atomic(out / "_about_manythings.txt", zf.read(about))
    splits = split_pairs(pairs, n_valid, n_test, seed)
    for name, rows in [("pairs", pairs), *splits.items()]:
        _write_tsv(out / f"{name}.tsv", [("en", lang), *((p.src, p.tgt) for p in rows)])


_MULTI30K_SPLITS = {"train": "train", "val": "valid", "test_2016_flickr": "test"}


def convert_multi30k(downloads: list[Path], data_dir: Path) -> None:
    """Gunzip ``{train,val,test_2016_flickr}.{de,en}.gz`` to ``multi30k/{train,valid,test}.{de,en}``."""
    for path in downloads:
        split, lang, _ = path.name.rsplit(".", 2)
        _write_atomic(
            data_dir / "multi30k" / f"{_MULTI30K_SPLITS[split]}.{lang}", gzip.decompress(path.read_bytes())
        )


# --- registry ------------------------------------------------------------------------------------

_NSMC = "https://raw.githubusercontent.com/e9t/nsmc/master"
_NSMC_TRAIN = "e03b7d14e9e41be8d464a28057cd25d7396c53e67aa7fd5f7e552c59b0ee2940"
_NSMC_TEST = "8ac9f64052f11dbf6ae0acb5e038f03d90a76f0eda7820cfb3a92d02edfcebda"
_M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
_M30K_SHA = {  # of the decompressed files (multi30k/SOURCE.md); the .gz hashes are not published
    "train.de": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    "train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "valid.de": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    "valid.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "test.de": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
    "test.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
}


def _tatoeba(url: str, sha256: str, lang: str) -> Dataset:
    stem = url.rsplit("/", 1)[1].removesuffix(".zip")  # fra-eng
    return Dataset(
        sources=(Source(url, f"downloads/{stem}.zip", sha256),),
        outputs=tuple((f"tatoeba/{stem}/{s}.tsv", None) for s in ("pairs", "train", "valid", "test")),
        convert=partial(convert_manythings, member=f"{stem}/{stem[:3]}.txt", lang=lang),
    )


REGISTRY: dict[str, Dataset] = {
    "nsmc": Dataset(
        sources=(
            Source(f"{_NSMC}/ratings_train.txt", "nsmc/ratings_train.tsv", _NSMC_TRAIN, 14_628_807),
            Source(f"{_NSMC}/ratings_test.txt", "nsmc/ratings_test.tsv", _NSMC_TEST, 4_893_335),
        ),
        outputs=(("nsmc/ratings_train.tsv", _NSMC_TRAIN), ("nsmc/ratings_test.tsv", _NSMC_TEST)),
    ),
    "imdb": Dataset(
        sources=(
            Source(
                "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
                "downloads/aclImdb_v1.tar.gz",
                "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
            ),
        ),
        outputs=(("imdb/train.tsv.gz", None), ("imdb/test.tsv", None)),
        convert=convert_imdb,
    ),
    "tatoeba-fra": _tatoeba(
        "https://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip",
        "161c93f18da3a7e6df611ed961426613260de8af06ccf8c79c977afe5135ac44",
        "fr",
    ),
    "tatoeba-spa": _tatoeba(
        "https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
        "f80e581ae291aa34dd3aba7bd98b5e9505234da4318e2f3295df70a1520c7f61",
        "es",
    ),
    "multi30k": Dataset(
        sources=tuple(
            Source(f"{_M30K}/{up}.{lang}.gz", f"downloads/multi30k/{up}.{lang}.gz")
            for up in _MULTI30K_SPLITS
            for lang in ("de", "en")
        ),
        outputs=tuple((f"multi30k/{name}", sha) for name, sha in _M30K_SHA.items()),
        convert=convert_multi30k,
    ),
}


# --- entry points --------------------------------------------------------------------------------


def _outputs_ok(dataset: Dataset, data_dir: Path) -> bool:
    return all(
        (data_dir / rel).is_file() and (sha is None or sha256sum(data_dir / rel) == sha)
        for rel, sha in dataset.outputs
    )


def download(
    names: Iterable[str],
    data_dir: Path,
    *,
    mirror: str | None = None,
    registry: Mapping[str, Dataset] = REGISTRY,
) -> None:
    """Fetch, convert and verify each named dataset of ``registry`` into ``data_dir``."""
    for name in names:
        dataset = registry[name]
        if _outputs_ok(dataset, data_dir):
            log.info("%s: already in %s", name, data_dir)
            continue
        paths = [fetch(src, data_dir, mirror=mirror) for src in dataset.sources]
        if dataset.convert is not None:
            log.info("%s: converting", name)
            dataset.convert(paths, data_dir)
        for rel, sha in dataset.outputs:
            path = data_dir / rel
            if not path.is_file():
                raise DownloadError(f"{name}: conversion did not produce {path}")
            if sha is not None and (actual := sha256sum(path)) != sha:
                path.unlink()
                urls = ", ".join(mirrored(s.url, mirror) for s in dataset.sources)
                raise DownloadError(
                    f"sha256 mismatch for {path} (made from {urls}): expected {sha}, got {actual} (file deleted)"
                )
        log.info("%s: ready in %s", name, data_dir)


def cli(argv: list[str] | None = None, *, registry: Mapping[str, Dataset] = REGISTRY) -> int:
    """``download DATASET [DATASET ...] | all [--data-dir DIR] [--mirror URL]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m training download",
        description="Download the public datasets, check their sha256 and write the layout training reads.",
        epilog="nsmc/unlabeled.txt.gz (nsmc-unlabeled) is derived from the raw e9t/nsmc crawl and cannot be "
        "downloaded: copy it from a machine that has shared/data. imdb test.tsv gets all 25,000 official test "
        "reviews; tatoeba splits are remade with a fixed seed from all source pairs, so they differ from the shared "
        "copy and their train split may hold pairs that shared/data withholds for evaluation.",
    )
    parser.add_argument(
        "datasets",
        nargs="+",
        metavar="DATASET",
        choices=[*registry, "all"],
        help=", ".join([*registry, "all"]),
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"target directory (default: ${DATA_DIR_ENV}, else <repo>/../shared/data)",
    )
    parser.add_argument("--mirror", metavar="URL", help="fetch each file from URL/<file name> instead")
    args = parser.parse_args(argv)
    names = list(registry) if "all" in args.datasets else list(dict.fromkeys(args.datasets))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data_dir = resolve_data_dir(args.data_dir)
    try:
        download(names, data_dir, mirror=args.mirror, registry=registry)
    except (DownloadError, OSError) as err:
        log.error("download failed: %s", err)
        return 1
    return 0

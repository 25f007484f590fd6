"""training.download against a local HTTP server that serves tiny archives built in tmp_path."""

import gzip
import hashlib
import io
import logging
import re
import shutil
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from training import data, download
from training.data import LabeledText, Pair, load_split
from training.download import Dataset, DownloadError, Source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"


def sha(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


# --- a local server with Range support ------------------------------------------------------------


@dataclass
class Served:
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (file name, Range header)
    bytes_sent: int = 0
    honour_range: bool = True


class Handler(BaseHTTPRequestHandler):
    server: "Server"

    def do_GET(self) -> None:
        state, name, rng = self.server.state, self.path.rsplit("/", 1)[1], self.headers.get("Range")
        state.requests.append((name, rng))
        body = state.files.get(name)
        if body is None:
            self.send_error(404)
            return
        start = 0
        if rng and state.honour_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng)[1])  # type: ignore[index]
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        # counted before the write: the client may return as soon as it has read
        state.bytes_sent += len(body) - start
        self.wfile.write(body[start:])

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class Server(ThreadingHTTPServer):
    state: Served


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.state = Served()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/mirror", srv.state
    srv.shutdown()
    srv.server_close()
    thread.join()


# --- tiny upstream files ---------------------------------------------------------------------------

IMDB_FILES = {
    "aclImdb/train/pos/3_9.txt": "Loved it.<br /><br />Would watch again\tand again.",
    "aclImdb/train/pos/10_7.txt": "Good fun.",
    "aclImdb/train/neg/2_1.txt": "Awful\x85 truly.",
    "aclImdb/test/pos/0_10.txt": "Masterpiece.",
    "aclImdb/test/neg/5_3.txt": "Boring.",
    "aclImdb/train/unsup/0_0.txt": "unlabeled, ignored",
    "aclImdb/README": "readme",
    "../escape.txt": "must never be written",
}
FRA = [  # groups: Go. (3 pairs), Hi. (2), Stop! (2), a cross-column link (2), singletons
    ("Go.", "Va !"),
    ("Go.", "Marche."),
    ("Go.", "Bouge !"),
    ("Hi.", "Salut !"),
    ("Hi.", "Salut."),
    ("Run!", "Cours !"),
    ("Who?", "Qui ?"),
    ("Wow!", "Ça alors !"),
    ("Fire!", "Au feu !"),
    ("Help!", "À l'aide !"),
    ("Stop!", "Arrête !"),
    ("Stop!", "Stop !"),
    ("Stop !", "Halte !"),
    ("Wait!", "Attends !"),
    ("Jump.", "Saute."),
]
SPA = [
    ("Go.", "Ve."),
    ("Hi.", "Hola."),
    ("Run!", "¡Corre!"),
    ("Who?", "¿Quién?"),
    ("Fire!", "¡Fuego!"),
    ("Help!", "¡Ayuda!"),
]
M30K = {"train": ["Ein Hund.", "Zwei Katzen."], "val": ["Ein Mann."], "test_2016_flickr": ["Eine Frau."]}
M30K_EN = {"train": ["A dog.", "Two cats."], "val": ["A man."], "test_2016_flickr": ["A woman."]}


def targz(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            blob = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return buf.getvalue()


def zipped(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


def upstream_files() -> dict[str, bytes]:
    """What the public servers would hold, keyed by file name."""
    files = {
        "ratings_train.txt": (FIXTURES / "nsmc" / "ratings_train.tsv").read_bytes(),
        "ratings_test.txt": (FIXTURES / "nsmc" / "ratings_test.tsv").read_bytes(),
        "aclImdb_v1.tar.gz": targz(IMDB_FILES),
        # fra: the newer 3-column format; spa: the older 2-column one
        "fra-eng.zip": zipped(
            {
                "fra-eng/fra.txt": "".join(
                    f"{en}\t{fr}\tCC-BY 2.0 (France) #{i}\n" for i, (en, fr) in enumerate(FRA)
                ),
                "fra-eng/_about.txt": "www.manythings.org/anki and tatoeba.org\n",
            }
        ),
        "spa-eng.zip": zipped({"spa-eng/spa.txt": "".join(f"{en}\t{es}\n" for en, es in SPA)}),
    }
    for split in M30K:
        files[f"{split}.de.gz"] = gzip.compress("".join(s + "\n" for s in M30K[split]).encode())
        files[f"{split}.en.gz"] = gzip.compress("".join(s + "\n" for s in M30K_EN[split]).encode())
    return files


def fixture_registry(files: dict[str, bytes]) -> dict[str, Dataset]:
    """download.REGISTRY with the fixtures' hashes and small tatoeba quotas."""
    reg = {}
    for name, ds in download.REGISTRY.items():
        sources = tuple(
            replace(s, sha256=sha(files[s.url.rsplit("/", 1)[1]]) if s.sha256 else None, size=None)
            for s in ds.sources
        )
        reg[name] = replace(ds, sources=sources)
    nsmc = reg["nsmc"]
    reg["nsmc"] = replace(nsmc, outputs=tuple((s.filename, s.sha256) for s in nsmc.sources))
    m30k = {"train": "train", "val": "valid", "test_2016_flickr": "test"}
    outputs = [
        (f"multi30k/{m30k[n[:-6]]}.{n[-5:-3]}", sha(gzip.decompress(b)))
        for n, b in files.items()
        if n[-6:-3] in (".de", ".en")
    ]
    reg["multi30k"] = replace(reg["multi30k"], outputs=tuple(outputs))
    for name in ("tatoeba-fra", "tatoeba-spa"):
        reg[name] = replace(reg[name], convert=partial(reg[name].convert, n_valid=2, n_test=3))
    return reg


@pytest.fixture
def upstream(server: tuple[str, Served]) -> tuple[str, Served, dict[str, Dataset]]:
    base, state = server
    state.files = upstream_files()
    return base, state, fixture_registry(state.files)


# --- end to end -----------------------------------------------------------------------------------


def test_download_all_gives_the_layout_load_split_reads(upstream, tmp_path: Path) -> None:
    base, state, reg = upstream
    assert download.cli(["all", "--data-dir", str(tmp_path), "--mirror", base], registry=reg) == 0
    assert {name for name, _ in state.requests} == set(state.files)
    for name in data.DATASETS:
        if name != "nsmc-unlabeled":  # derived from the raw crawl: not downloadable
            for split in data.splits(name):
                load_split(name, split, tmp_path)  # every file it needs exists and parses
    assert load_split("nsmc", "test", tmp_path) == data.read_nsmc(FIXTURES / "nsmc" / "ratings_test.tsv")
    # imdb: label from the directory, tab and U+0085 replaced, unsup/ and unsafe names ignored
    imdb = data.read_imdb(tmp_path / "imdb" / "train.tsv.gz")
    assert sorted(imdb, key=lambda r: r.text) == [
        LabeledText("Awful  truly.", 0),
        LabeledText("Good fun.", 1),
        LabeledText("Loved it. Would watch again and again.", 1),
    ]
    assert sorted(load_split("imdb", "test", tmp_path), key=lambda r: r.label) == [
        LabeledText("Boring.", 0),
        LabeledText("Masterpiece.", 1),
    ]
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path.parent / "escape.txt").exists()
    # tatoeba: header en<TAB>fr, pairs.tsv = every pair, splits 2 / 3 / rest
    fra = tmp_path / "tatoeba" / "fra-eng"
    assert (fra / "train.tsv").read_text(encoding="utf-8").startswith("en\tfr\n")
    assert data.read_tsv_pairs(fra / "pairs.tsv", "en", "fr") == [Pair(en, fr) for en, fr in FRA]
    sizes = [len(load_split("tatoeba-en-fr", s, tmp_path)) for s in ("train", "valid", "test")]
    assert sizes == [len(FRA) - 5, 2, 3]
    assert (fra / "_about_manythings.txt").is_file()
    assert load_split("tatoeba-es-en", "train", tmp_path)[0].tgt in {en for en, _ in SPA}
    assert load_split("multi30k-en-de", "train", tmp_path) == [
        Pair("A dog.", "Ein Hund."),
        Pair("Two cats.", "Zwei Katzen."),
    ]
    assert load_split("multi30k-de-en", "valid", tmp_path) == [Pair("Ein Mann.", "A man.")]
    assert not list(tmp_path.rglob("*.part"))
    assert not list(tmp_path.rglob("*.tmp"))
    # a second run finds the converted files in place (archives gone) and asks the server for nothing
    shutil.rmtree(tmp_path / "downloads")
    state.requests.clear()
    assert download.cli(["all", "--data-dir", str(tmp_path), "--mirror", base], registry=reg) == 0
    assert state.requests == []


def test_imdb_conversion_is_deterministic(upstream, tmp_path: Path) -> None:
    base, _, reg = upstream
    for out in (tmp_path / "a", tmp_path / "b"):
        download.download(["imdb"], out, mirror=base, registry=reg)
    assert (tmp_path / "a" / "imdb" / "train.tsv.gz").read_bytes() == (
        tmp_path / "b" / "imdb" / "train.tsv.gz"
    ).read_bytes()


# --- fetch mechanics -------------------------------------------------------------------------------


def test_mirrored_replaces_everything_up_to_the_file_name() -> None:
    url = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.de.gz"
    assert download.mirrored(url, "http://127.0.0.1:8/m/") == "http://127.0.0.1:8/m/val.de.gz"
    assert download.mirrored(url, None) == url


def test_checksum_mismatch_raises_and_leaves_no_file(upstream, tmp_path: Path) -> None:
    base, _, reg = upstream
    bad = replace(reg["nsmc"].sources[0], sha256="0" * 64)
    with pytest.raises(DownloadError) as info:
        download.fetch(bad, tmp_path, mirror=base)
    message = str(info.value)
    assert f"{base}/ratings_train.txt" in message
    assert "0" * 64 in message
    assert sha(upstream_files()["ratings_train.txt"]) in message
    assert not (tmp_path / "nsmc" / "ratings_train.tsv").exists()
    assert not (tmp_path / "nsmc" / "ratings_train.tsv.part").exists()


def test_output_checksum_mismatch_deletes_the_output(upstream, tmp_path: Path) -> None:
    base, _, reg = upstream
    outputs = tuple(
        (rel, "f" * 64 if rel == "multi30k/valid.en" else h) for rel, h in reg["multi30k"].outputs
    )
    reg["multi30k"] = replace(reg["multi30k"], outputs=outputs)
    with pytest.raises(
        DownloadError, match=r"sha256 mismatch for .*valid\.en \(made from .*val\.de\.gz.*expected f{64}"
    ):
        download.download(["multi30k"], tmp_path, mirror=base, registry=reg)
    assert not (tmp_path / "multi30k" / "valid.en").exists()


@pytest.mark.parametrize("honour_range", [True, False])
def test_resume_from_part_file(upstream, tmp_path: Path, honour_range: bool) -> None:
    base, state, reg = upstream
    state.honour_range = honour_range
    src = reg["imdb"].sources[0]
    blob = state.files["aclImdb_v1.tar.gz"]
    part = tmp_path / (src.filename + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(blob[:100])
    path = download.fetch(src, tmp_path, mirror=base)
    assert path.read_bytes() == blob
    assert state.requests == [("aclImdb_v1.tar.gz", "bytes=100-")]
    # a server that answers 200 to the range request sends it all, and the download starts over
    assert state.bytes_sent == (len(blob) - 100 if honour_range else len(blob))
    assert not part.exists()


def test_complete_part_file_answered_416_is_kept(upstream, tmp_path: Path) -> None:
    base, state, reg = upstream
    src = reg["nsmc"].sources[1]
    blob = state.files["ratings_test.txt"]
    (tmp_path / "nsmc").mkdir()
    (tmp_path / "nsmc" / "ratings_test.tsv.part").write_bytes(blob)
    assert download.fetch(src, tmp_path, mirror=base).read_bytes() == blob
    assert state.bytes_sent == 0


def test_present_file_is_not_downloaded_again(upstream, tmp_path: Path) -> None:
    base, state, reg = upstream
    src = reg["nsmc"].sources[1]
    dest = tmp_path / src.filename
    dest.parent.mkdir(parents=True)
    dest.write_bytes(state.files["ratings_test.txt"])
    assert download.fetch(src, tmp_path, mirror=base) == dest
    assert state.requests == []
    dest.write_bytes(b"corrupted")  # a wrong hash is fetched again
    assert download.fetch(src, tmp_path, mirror=base).read_bytes() == state.files["ratings_test.txt"]
    assert state.requests == [("ratings_test.txt", None)]


def test_http_error_names_the_url(upstream, tmp_path: Path) -> None:
    base, _, _ = upstream
    with pytest.raises(DownloadError, match=r"/mirror/nope\.gz: HTTP 404"):
        download.fetch(Source("https://example.org/nope.gz", "nope.gz"), tmp_path, mirror=base)


def test_unreachable_host_gives_the_offline_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mirror = f"http://127.0.0.1:{port}"
    with pytest.raises(
        DownloadError, match=rf"could not reach 127\.0\.0\.1:{port} .*copy .* into {re.escape(str(tmp_path))}"
    ):
        download.download(["nsmc"], tmp_path, mirror=mirror)
    with caplog.at_level(logging.ERROR, logger="training.download"):
        assert download.cli(["nsmc", "--data-dir", str(tmp_path), "--mirror", mirror]) == 1
    assert "could not reach" in caplog.text


def test_cli_rejects_unknown_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        download.cli(["sst2"])
    assert "invalid choice" in capsys.readouterr().err


# --- tatoeba split ---------------------------------------------------------------------------------


def test_group_pairs_links_shared_strings_across_columns() -> None:
    pairs = [Pair("a", "b"), Pair("c", "d"), Pair("e", "a"), Pair("d", "f"), Pair("g", "h")]
    assert download.group_pairs(pairs) == [[0, 2], [1, 3], [4]]


def test_split_pairs_is_leakage_free_sized_and_seeded() -> None:
    pairs = [Pair(en, fr) for en, fr in FRA]
    splits = download.split_pairs(pairs, n_valid=2, n_test=3, seed=1)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [len(FRA) - 5, 2, 3]
    strings = {s: {t for p in rows for t in (p.src, p.tgt)} for s, rows in splits.items()}
    assert not strings["train"] & strings["valid"]
    assert not strings["train"] & strings["test"]
    assert not strings["valid"] & strings["test"]
    assert sorted(map(pairs.index, splits["test"])) == list(map(pairs.index, splits["test"]))  # source order
    assert download.split_pairs(pairs, n_valid=2, n_test=3, seed=1) == splits
    others = [download.split_pairs(pairs, n_valid=2, n_test=3, seed=s)["test"] for s in range(2, 8)]
    assert any(o != splits["test"] for o in others)


# --- registry vs the real files --------------------------------------------------------------------


@pytest.mark.data
def test_registry_hashes_match_the_shared_files() -> None:
    root = data.resolve_data_dir()
    checked = 0
    for ds in download.REGISTRY.values():
        for rel, expected in ds.outputs:
            if expected is not None and (root / rel).is_file():
                assert download.sha256sum(root / rel) == expected, rel
                checked += 1
    if not checked:
        pytest.skip(f"no dataset files under {root}")
    assert checked == 8

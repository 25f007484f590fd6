"""`python -m training pull argos:SRC-TGT[@VERSION]` against a stand-in Argos package index on localhost: its
index.json as argospm's (entries of package metadata, links, an sbd package), and .argosmodel zips built
here from our tiny translator in Argos' layout (tests/argos_package.py), well-formed or broken on purpose."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engines.argos import read_argos_package
from tests.argos_package import argos_name, argos_zip
from tests.training.pull_cli import refused
from tests.training.standin import Answer, Site, serve
from training import progress, pull, pull_argos

pytest.importorskip("ctranslate2")

ROOT = Path(__file__).resolve().parents[2]
TOP = argos_name("fr", "en", "1.9")
INDEX = "/argospm-index/main/"  # ARGOS_PACKAGE_INDEX, a folder as argostranslate reads it
PACKAGE = f"/v1/{TOP}.argosmodel"


def entries(package: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(package)) as z:
        return {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}


def zipped(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    """`files` (and `links`: name -> target, as symbolic links the way Info-ZIP stores them) as a zip."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)  # the name as given: "../x" and "/x" too
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system, info.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, target)
    return buf.getvalue()


def relabelled(package: bytes, **metadata: str) -> bytes:
    files = entries(package)
    meta = json.loads(files[f"{TOP}/metadata.json"]) | metadata
    return zipped(files | {f"{TOP}/metadata.json": json.dumps(meta).encode()})


@pytest.fixture(scope="module")
def package(tiny_translator_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Our tiny fr -> en translator as Argos' package translate-fr_en-1_9."""
    out = tmp_path_factory.mktemp("argos") / f"{TOP}.argosmodel"
    return argos_zip(tiny_translator_checkpoint, out, "fr", "en", "1.9").read_bytes()


@pytest.fixture
def index(package: bytes, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The stand-in index: fr-en 1.9 (an ipfs link, a dead link, then the package), fr-en 1.0, en-de, and a
    sentence-splitting package; ARGOS_PACKAGE_INDEX names it."""
    with serve() as site:
        entry = {"argos_version": "1.9.0", "from_code": "fr", "from_name": "French", "to_code": "en"}
        published = [
            {**entry, "package_version": "1.0", "links": [f"{site.base}/v1/translate-fr_en-1_0.argosmodel"]},
            {
                **entry,
                "package_version": "1.9",
                "links": ["ipfs://QmNotFetched", f"{site.base}/v1/gone.argosmodel", f"{site.base}{PACKAGE}"],
                "code": "translate-fr_en",
            },
            {"package_version": "1.0", "from_code": "en", "to_code": "de", "links": [f"{site.base}/x"]},
            {"package_version": "1.0", "type": "sbd", "from_code": "en", "to_code": "en", "links": []},
        ]
        site.answers[f"{INDEX}index.json"] = Answer(json.dumps(published, indent=4).encode())
        site.answers[PACKAGE] = Answer(package)
        site.answers["/v1/translate-fr_en-1_0.argosmodel"] = Answer(
            relabelled(package, package_version="1.0")
        )
        monkeypatch.setenv(pull_argos.INDEX_ENV, site.base + INDEX)
        yield site


def test_the_package_is_written_as_published_and_served(
    package: bytes, index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "checkpoints"
    assert pull.cli(["argos:fr-en", "--out-dir", str(out)]) == 0
    got = out / "argos-fr-en"
    assert (
        capsys.readouterr().out
        == f"wrote {got} from argos:fr-en package_version 1.9 ({index.base}{INDEX}index.json)\n"
    )
    assert [p.name for p in out.iterdir()] == ["argos-fr-en"]  # no staging folder, no download left
    published = {name.removeprefix(f"{TOP}/"): data for name, data in entries(package).items()}
    assert sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file()) == sorted(published)
    for name, data in published.items():
        assert (got / name).read_bytes() == data or name == "README.md"
    card = (got / "README.md").read_text()
    assert card.startswith(
        published["README.md"].decode().rstrip() + "\n\n## Pulled from the Argos Translate"
    )
    assert f"- index: {index.base}{INDEX}index.json\n" in card
    assert "package_version 1.9, argos_version 1.0" in card  # the package's own metadata
    assert f"downloaded from: {index.base}{PACKAGE} (sha256 {hashlib.sha256(package).hexdigest()})" in card
    assert "- check: opened and run once by CTranslate2" in card
    assert ("GET", "/v1/gone.argosmodel") in index.asked  # a dead link: the next one is tried
    read = read_argos_package(got)
    assert (read.config.source_langs, read.config.target_langs) == (("fr",), ("en",))

    from app.core.settings import Settings
    from app.registry import Registry
    from app.tasks.translation_routes import translation_routes

    registry = Registry.discover(out, torch.device("cpu"), torch.float32)
    assert translation_routes(Settings(checkpoint_dir=out), registry).pairs == {("fr", "en"): "argos-fr-en"}


def test_a_version_is_pinned_and_an_absent_one_refused(
    index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "checkpoints"
    assert pull.cli(["argos:fr-en@1.0", "--name", "old", "--out-dir", str(out)]) == 0
    assert read_argos_package(out / "old").metadata["package_version"] == "1.0"
    err = refused(capsys, ["argos:fr-en@2.0", "--out-dir", str(out)])
    assert "fr-en has no package_version 2.0 in" in err
    assert err.endswith("it has ['1.0', '1.9']\n")
    assert [p.name for p in out.iterdir()] == ["old"]


def test_an_unknown_pair_lists_the_pairs_there_are(
    index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x" / "checkpoints"
    err = refused(capsys, ["argos:fr-xx", "--out-dir", str(out)])
    assert err.endswith(
        f"no Argos package translates fr -> xx in {index.base}{INDEX}index.json; it has en-de, fr-en\n"
    )
    assert not (tmp_path / "x").exists()  # not even --out-dir's parents
    assert [path for _, path in index.asked] == [f"{INDEX}index.json"]


def broken(package: bytes) -> dict[str, tuple[bytes, str]]:
    """Packages that must be refused, with the reason given."""
    files = entries(package)
    meta = f"{TOP}/metadata.json"
    return {
        "parent": (
            zipped(files | {"../escape.txt": b"x"}),
            "'../escape.txt' would be written outside its folder",
        ),
        "inner parent": (
            zipped(files | {f"{TOP}/../../escape.txt": b"x"}),
            "would be written outside its folder",
        ),
        "absolute": (zipped(files | {"/tmp/escape.txt": b"x"}), "'/tmp/escape.txt' would be written outside"),
        "symlink": (
            zipped(files, {f"{TOP}/model/escape": "/etc"}),
            f"'{TOP}/model/escape' is a symbolic link",
        ),
        "two tops": (zipped(files | {"other/x": b"x"}), f"this one has 2: ['other', '{TOP}']"),
        "not a zip": (b"<html>not found</html>", "the package is not a zip archive"),
        "other pair": (
            relabelled(package, from_code="es"),
            f"{TOP}.argosmodel translates es -> en, not fr -> en",
        ),
        "no sentencepiece": (
            zipped({k: v for k, v in files.items() if not k.endswith("sentencepiece.model")}),
            "sentencepiece.model: missing",
        ),
        "sbd": (
            zipped(files | {meta: json.dumps({"type": "sbd"}).encode()}),
            "a 'sbd' package, not a translation",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "parent",
        "inner parent",
        "absolute",
        "symlink",
        "two tops",
        "not a zip",
        "other pair",
        "no sentencepiece",
        "sbd",
    ],
)
def test_a_broken_package_writes_nothing(
    package: bytes, index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    body, reason = broken(package)[case]
    index.answers[PACKAGE] = Answer(body)
    out = tmp_path / "checkpoints"
    err = refused(capsys, ["argos:fr-en", "--out-dir", str(out)])
    assert reason in err
    assert not out.exists()
    assert not any(tmp_path.parent.rglob("escape.txt"))


def test_a_short_download_or_an_oversized_one_writes_nothing(
    package: bytes,
    index: Site,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "checkpoints"
    index.answers[PACKAGE] = Answer(package, sent=len(package) // 2)  # the connection drops half-way
    err = refused(capsys, ["argos:fr-en", "--out-dir", str(out)])
    assert f"ended after {len(package) // 2} of {len(package)} bytes" in err
    assert not out.exists()
    monkeypatch.setattr(pull_argos, "MAX_DOWNLOAD", 1000)
    index.answers[PACKAGE] = Answer(package)
    err = refused(capsys, ["argos:fr-en", "--out-dir", str(out)])
    assert f"{index.base}{PACKAGE}: {len(package)} bytes, more than the 1000 read" in err
    assert not out.exists()


def test_a_zip_bomb_stops_at_the_unpacked_bound(
    package: bytes,
    index: Site,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pull_argos, "MAX_UNPACKED", 4 << 20)
    bomb = zipped(entries(package) | {f"{TOP}/zeros": bytes(16 << 20)})  # 16 MB of zeros: 16 kB deflated
    assert len(bomb) < len(package) + (100 << 10)
    index.answers[PACKAGE] = Answer(bomb)
    out = tmp_path / "checkpoints"
    err = refused(capsys, ["argos:fr-en", "--out-dir", str(out)])
    assert f"unpacks to more than {4 << 20} bytes: refused" in err
    assert not out.exists()


def test_names_force_and_languages_are_the_importers(
    index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "checkpoints"
    assert pull.cli(["argos:fr-en", "--out-dir", str(out)]) == 0
    err = refused(capsys, ["argos:fr-en", "--out-dir", str(out)])
    assert "already exists (--force replaces it)" in err
    (out / "argos-fr-en" / "README.md").write_text("old\n")
    assert pull.cli(["argos:fr-en", "--out-dir", str(out), "--force"]) == 0  # an Argos package is replaceable
    assert (out / "argos-fr-en" / "README.md").read_text() != "old\n"
    assert "a checkpoint name is 1 to 100 letters" in refused(capsys, ["argos:fr-en", "--name", "../x"])
    assert "an Argos package's are its metadata's" in refused(capsys, ["argos:fr-en", "--lang", "fr"])
    assert "expected argos:SRC-TGT[@VERSION]" in refused(capsys, ["argos:fren"])
    assert sorted(p.name for p in out.iterdir()) == ["argos-fr-en"]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, f"cannot read the Argos package index (ARGOS_PACKAGE_INDEX): BASE{INDEX}index.json: HTTP 404"),
        (Answer(b"<html>"), f"the Argos package index BASE{INDEX}index.json is not JSON"),
        (Answer(b'{"packages": []}'), "is not a JSON list of packages"),
    ],
)
def test_an_index_that_cannot_be_read_is_one_line(
    index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: Answer | None, reason: str
) -> None:
    if answer is None:
        del index.answers[f"{INDEX}index.json"]
    else:
        index.answers[f"{INDEX}index.json"] = answer
    err = refused(capsys, ["argos:fr-en", "--out-dir", str(tmp_path / "checkpoints")])
    assert reason.replace("BASE", index.base) in err
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    ("setting", "url"),
    [
        (None, "https://raw.githubusercontent.com/argosopentech/argospm-index/main/index.json"),
        ("http://mirror/argos", "http://mirror/argos/index.json"),
        ("http://mirror/argos/", "http://mirror/argos/index.json"),
        ("http://mirror/my-index.json", "http://mirror/my-index.json"),
    ],
)
def test_the_index_is_read_where_argostranslate_reads_it(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, url: str
) -> None:
    if setting is None:
        monkeypatch.delenv(pull_argos.INDEX_ENV, raising=False)
    else:
        monkeypatch.setenv(pull_argos.INDEX_ENV, setting)
    assert pull_argos.index_url() == url


def events(stdout: str) -> list[dict]:
    """Every line of stdout, each a JSON object."""
    return [json.loads(line) for line in stdout.splitlines()]


def test_progress_json_counts_each_files_bytes(
    package: bytes,
    index: Site,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pull_argos, "CHUNK", 1 << 14)
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    out = tmp_path / "checkpoints"
    assert pull.cli(["argos:fr-en", "--progress", "json", "--out-dir", str(out)]) == 0
    said = capsys.readouterr()
    got = events(said.out)
    assert said.err.startswith(f"wrote {out / 'argos-fr-en'} from argos:fr-en")  # people's lines: stderr
    assert got[0] == {"phase": "resolve", "spec": "argos:fr-en"}
    assert got[-2:] == [
        {"phase": "check"},
        {
            "phase": "done",
            "checkpoint": str((out / "argos-fr-en").absolute()),
            "source": "argos:fr-en",
            "version": "1.9",
        },
    ]
    index_json = len(index.answers[f"{INDEX}index.json"].body)
    assert [e for e in got if e.get("file") == "index.json"] == [
        {"phase": "download", "file": "index.json", "done": n, "total": index_json} for n in (0, index_json)
    ]
    done = [e["done"] for e in got if e.get("file") == f"{TOP}.argosmodel"]
    assert {e["total"] for e in got if e.get("file") == f"{TOP}.argosmodel"} == {len(package)}
    assert done == [0, *range(1 << 14, len(package), 1 << 14), len(package)]  # each chunk: INTERVAL is 0


def test_progress_json_ends_with_the_error(
    index: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["argos:fr-xx", "--progress", "json", "--out-dir", str(tmp_path / "checkpoints")]
    assert pull.cli(argv) == 1
    said = capsys.readouterr()
    message = said.err.removeprefix("error: pull argos:fr-xx: ").rstrip("\n")
    assert events(said.out)[-1] == {"phase": "error", "message": message}
    assert message.startswith("no Argos package translates fr -> xx")


def test_the_cli_writes_only_json_on_stdout(index: Site, tmp_path: Path) -> None:
    """The command the server will run, in its own process."""
    out = tmp_path / "checkpoints"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "pull",
            "--progress",
            "json",
            "argos:fr-en",
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    got = events(run.stdout)
    assert got[-1]["phase"] == "done"
    assert got[-1]["checkpoint"] == str(out.absolute() / "argos-fr-en")
    assert {e["phase"] for e in got} == {"resolve", "download", "check", "done"}
    assert f"wrote {out / 'argos-fr-en'}" in run.stderr

"""`python -m training pull ORG/NAME[@REVISION]` against a local hub: a huggingface_hub cache in tmp_path, in its
on-disk layout (models--ORG--NAME/{blobs, refs/REF, snapshots/SHA}), read with HF_HUB_OFFLINE=1; and, for
--progress json, a stand-in hub on localhost that snapshot_download downloads from."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from model.checkpoint import load_checkpoint
from model.inference import translate_ids
from model.options import DecodeOptions
from model.preprocess import source_ids
from tests.training.pull_cli import refused
from tests.training.standin import Answer, Site, serve
from training import imports, progress, pull

pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

REPO = "Helsinki-NLP/opus-mt-fr-en"
MAIN, OLD = "a" * 40, "b" * 40  # commit shas
CARD = "---\nlanguage: [fr, en]\nlicense: apache-2.0\ntags: [translation]\n---\n# opus-mt-fr-en\n"
ROOT = Path(__file__).resolve().parents[2]


def publish(cache: Path, repo: str, folder: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> None:
    """folder's files as huggingface_hub caches them: blobs by content hash, the commit's snapshot of
    relative symlinks to them, and each ref a file holding the commit (no newline, as the hub writes it)."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir(exist_ok=True)
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        data = f.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    for ref in refs:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)


def with_card(src: Path, dst: Path, card: str | None = CARD) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    if card is not None:
        (dst / "README.md").write_text(card)
    return dst


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty offline hub cache, named by the environment as a user would."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def greedy(path: Path, texts: list[str]) -> list[list[int]]:
    loaded = load_checkpoint(path)
    seqs = [source_ids(loaded.tokenizer, t, loaded.config) for t in texts]  # type: ignore[arg-type]
    hyps = translate_ids(loaded.model, seqs, DecodeOptions(1, 32, 0.0, 32, 0.0, 1))  # type: ignore[arg-type]
    return [h[0].tokens for h in hyps]


def test_marian_pull_equals_the_direct_import_and_records_its_source(
    tiny_marian_dir: Path, tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(hub, REPO, with_card(tiny_marian_dir, tmp_path / "repo"), MAIN)
    out = tmp_path / "checkpoints"
    assert pull.cli([REPO, "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "verify: 8 sentences -> en; source ids 8/8 equal" in printed
    assert printed.rstrip().endswith(f"from {REPO}@{MAIN} (license: apache-2.0)")
    direct = tmp_path / "direct"
    assert imports.cli(["marian", str(tiny_marian_dir), "--name", "m", "--out-dir", str(direct)]) == 0
    ours, theirs = load_checkpoint(out / "opus-mt-fr-en"), load_checkpoint(direct / "m")
    assert ours.meta["model"] == theirs.meta["model"]
    assert ours.meta["files"] == theirs.meta["files"]  # weights, tokenizers and vocab: the same sha256s
    texts = ["Le chat mange.", "Le chien voit la maison !"]
    assert greedy(out / "opus-mt-fr-en", texts) == greedy(direct / "m", texts)
    record = ours.meta["training"]["imported"]["hub"]
    assert {k: record[k] for k in ("repo", "revision", "requested", "license")} == {
        "repo": REPO,
        "revision": MAIN,
        "requested": "main",
        "license": "apache-2.0",
    }
    assert record["verification"]["compared"]
    assert 0 <= record["verification"]["largest_difference"] <= record["verification"]["tolerance"]
    card = (out / "opus-mt-fr-en" / "README.md").read_text()
    assert card.startswith("# opus-mt-fr-en\n")  # the final name, not the staging folder's
    assert f"{REPO} at commit `{MAIN}`" in card
    assert "license (the hub card's `license:`): apache-2.0" in card
    assert [p.name for p in out.iterdir()] == ["opus-mt-fr-en"]  # no staging folder left beside it


def test_a_revision_picks_its_snapshot(tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """@sha and @tag read that commit's snapshot, not main's; the license comes from that commit's card."""
    from tests.tiny_marian import build_marian

    new = build_marian(tmp_path / "new" / "opus-mt-fr-en", seed=1, train_steps=0)
    old = build_marian(tmp_path / "old" / "opus-mt-fr-en", seed=2, train_steps=0)
    publish(hub, REPO, with_card(new, tmp_path / "repo-new"), MAIN)
    publish(hub, REPO, with_card(old, tmp_path / "repo-old", card=None), OLD, refs=("v1",))
    out = tmp_path / "checkpoints"
    for spec, name in ((REPO, "main"), (f"{REPO}@{OLD}", "sha"), (f"{REPO}@v1", "tag")):
        assert pull.cli([spec, "--name", name, "--out-dir", str(out), "--no-verify"]) == 0
    assert imports.cli(["marian", str(old), "--name", "direct-old", "--out-dir", str(out)]) == 0
    capsys.readouterr()
    sha = {p.name: load_checkpoint(p).sha256 for p in out.iterdir()}
    assert sha["sha"] == sha["tag"] == sha["direct-old"] != sha["main"]
    record = json.loads((out / "tag" / "config.json").read_text())["training"]["imported"]["hub"]
    assert (record["revision"], record["requested"], record["license"]) == (OLD, "v1", "unknown")
    assert record["verification"] is None
    assert (
        "verification against transformers: not run (--no-verify)" in (out / "tag" / "README.md").read_text()
    )


def test_xlmr_pull_needs_languages_and_passes_them_through(
    tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.tiny_xlmr import build_xlmr

    folder = build_xlmr(tmp_path / "xlmr")
    publish(hub, "org/xlmr-sentiment", with_card(folder, tmp_path / "repo", "---\nlicense: mit\n---\n"), MAIN)
    out = tmp_path / "checkpoints"
    err = refused(capsys, ["org/xlmr-sentiment", "--out-dir", str(out)])
    assert "give --lang with the languages it classifies" in err
    assert not out.exists()
    assert pull.cli(["org/xlmr-sentiment", "--out-dir", str(out), "--lang", "en", "fr"]) == 0
    assert "verify: 8 texts; input ids 8/8 equal" in capsys.readouterr().out
    loaded = load_checkpoint(out / "xlmr-sentiment")
    assert loaded.config.source_langs == ("en", "fr")
    assert loaded.config.labels == ("negative", "neutral", "positive")
    assert loaded.meta["training"]["imported"]["hub"]["license"] == "mit"
    direct = tmp_path / "direct"
    argv = ["xlm-roberta", str(folder), "--name", "x", "--out-dir", str(direct), "--lang", "en", "fr"]
    assert imports.cli(argv) == 0
    assert loaded.meta["files"] == load_checkpoint(direct / "x").meta["files"]


@pytest.mark.parametrize(
    ("config", "shown"),
    [
        ({"model_type": "bert", "architectures": ["BertForSequenceClassification"]},
         "model_type 'bert' (BertForSequenceClassification) is not supported"),
        ({"model_type": "xlm-roberta", "architectures": ["XLMRobertaForMaskedLM"]},
         "model_type 'xlm-roberta' (XLMRobertaForMaskedLM) is not supported"),
        ({}, "model_type None is not supported"),
    ],
)  # fmt: skip
def test_an_unknown_architecture_is_refused_listing_what_is_supported(
    tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str], config: dict, shown: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text(json.dumps(config))
    publish(hub, "org/other", repo, MAIN)
    out = tmp_path / "checkpoints"
    err = refused(capsys, ["org/other", "--out-dir", str(out)])
    assert shown in err
    assert f"pull supports {pull.SUPPORTED}" in err
    assert not out.exists()


def test_a_repository_or_revision_missing_offline_is_one_line(
    tiny_marian_dir: Path, tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(hub, REPO, tiny_marian_dir, MAIN)
    out = tmp_path / "x" / "checkpoints"
    for spec in ("org/absent", f"{REPO}@{OLD}", f"{REPO}@v2"):
        err = refused(capsys, [spec, "--out-dir", str(out)])
        assert f"is not in the hub cache {hub} and HF_HUB_OFFLINE is set" in err
    assert not (tmp_path / "x").exists()  # not even --out-dir's parents


def test_the_cli_refuses_without_a_traceback(tmp_path: Path, hub: Path) -> None:
    """The real command (huggingface_hub imported after the environment is set) says the same one line."""
    out = tmp_path / "checkpoints"
    run = subprocess.run(
        [sys.executable, "-m", "training", "pull", "org/absent", "--out-dir", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ},
        timeout=120,
    )
    assert run.returncode == 1
    assert run.stderr.endswith(f"org/absent@main is not in the hub cache {hub} and HF_HUB_OFFLINE is set\n")
    assert run.stderr.count("\n") == 1, run.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("argos:fr", "expected argos:SRC-TGT[@VERSION]"),
        ("opus-mt-fr-en", "expected ORG/NAME[@REVISION]"),
        ("a/b/c", "expected ORG/NAME[@REVISION]"),
        (f"{REPO}@", "expected ORG/NAME[@REVISION]"),
    ],
)
def test_what_is_not_a_hub_model_is_refused(
    tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str], spec: str, reason: str
) -> None:
    err = refused(capsys, [spec, "--out-dir", str(tmp_path / "checkpoints")])
    assert reason in err
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("name", ["..", "", "a/b", ".hidden"])
def test_names_and_force_are_the_importers(
    tiny_marian_dir: Path, tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The importer's name check and --force rules, before anything is downloaded."""
    publish(hub, REPO, tiny_marian_dir, MAIN)
    out = tmp_path / "checkpoints"
    (out / "notes").mkdir(parents=True)
    err = refused(capsys, ["org/absent", "--name", name, "--out-dir", str(out), "--force"])
    assert "a checkpoint name is 1 to 100 letters, digits, '.', '_' or '-'" in err
    err = refused(capsys, [REPO, "--name", "notes", "--out-dir", str(out), "--force"])
    assert "exists and is not a checkpoint folder (no config.json): not replaced" in err
    assert pull.cli([REPO, "--out-dir", str(out), "--no-verify"]) == 0
    err = refused(capsys, [REPO, "--out-dir", str(out), "--no-verify"])
    assert "already exists (--force replaces it)" in err
    assert pull.cli([REPO, "--out-dir", str(out), "--no-verify", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes", "opus-mt-fr-en"]


def test_a_failed_verification_writes_nothing(
    tiny_marian_dir: Path,
    tmp_path: Path,
    hub: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import training.verify_import

    def differs(*_: object) -> bool:
        print("verify: 8 sentences -> en; logits: largest difference 5.00e-01 (tolerance 0.001): DIFFERENT")
        return False

    monkeypatch.setattr(training.verify_import, "verify", differs)
    publish(hub, REPO, tiny_marian_dir, MAIN)
    out = tmp_path / "checkpoints"
    err = refused(capsys, [REPO, "--out-dir", str(out)])
    assert err.endswith("largest difference 5.00e-01 (tolerance 0.001): DIFFERENT\n")
    assert not out.exists()


@pytest.mark.parametrize(
    ("card", "want"),
    [
        (None, "unknown"),
        ("# no front matter\n", "unknown"),
        ("---\nlicense: cc-by-4.0\n---\n", "cc-by-4.0"),
        ("---\nlicense: [mit, apache-2.0]\n---\n", "mit, apache-2.0"),
        ("---\n- not a mapping\n---\n", "unknown"),
        ("---\nlicense: [unclosed\n---\n", "unknown"),
    ],
)
def test_the_license_comes_from_the_cards_front_matter(tmp_path: Path, card: str | None, want: str) -> None:
    if card is not None:
        (tmp_path / "README.md").write_text(card)
    assert pull.card_license(tmp_path / "README.md") == want


def test_a_repository_with_only_pytorch_model_bin_is_read_as_tensors(
    tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.tiny_xlmr import build_xlmr

    folder = build_xlmr(tmp_path / "xlmr", safetensors=False)
    assert not (folder / "model.safetensors").exists()
    publish(hub, "org/xlmr-bin", folder, MAIN)
    out = tmp_path / "checkpoints"
    assert pull.cli(["org/xlmr-bin", "--out-dir", str(out), "--lang", "en"]) == 0
    assert "labels 8/8 equal: OK" in capsys.readouterr().out
    assert load_checkpoint(out / "xlmr-bin").config.source_langs == ("en",)


def hub_site(site: Site, repo: str, folder: Path, commit: str) -> None:
    """folder's files answered as the hub answers snapshot_download: the revision's info (its commit, its
    files) by branch and by commit, and each file at its resolve URL with the headers huggingface_hub checks
    (X-Repo-Commit, ETag, Content-Length)."""
    files = {f.name: f.read_bytes() for f in folder.iterdir() if f.is_file()}
    info = {"id": repo, "sha": commit, "siblings": [{"rfilename": name} for name in sorted(files)]}
    for rev in ("main", commit):
        site.answers[f"/api/models/{repo}/revision/{rev}"] = Answer(json.dumps(info).encode())
    for name, data in files.items():
        etag = f'"{hashlib.sha256(data).hexdigest()}"'
        site.answers[f"/{repo}/resolve/{commit}/{name}"] = Answer(
            data, {"X-Repo-Commit": commit, "ETag": etag}
        )


@pytest.fixture
def online_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """A stand-in hub on localhost (HF_ENDPOINT) and an empty cache, online."""
    from huggingface_hub import constants

    with serve() as site:
        monkeypatch.setenv("HF_ENDPOINT", site.base)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield site


def downloads(stdout: str) -> dict[str, list[tuple[int, int]]]:
    """Each file's (done, total) download events, from stdout's lines, which must all be JSON."""
    counts: dict[str, list[tuple[int, int]]] = {}
    for event in map(json.loads, stdout.splitlines()):
        if event["phase"] == "download":
            counts.setdefault(event["file"], []).append((event["done"], event["total"]))
    return counts


def test_progress_json_counts_the_hubs_bytes_per_file(
    tiny_marian_dir: Path,
    tmp_path: Path,
    online_hub: Site,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Downloaded: every file counted from 0 to its size as huggingface_hub reads it; cached: one event per
    file, done == total. The hub's own bars are back as they were afterwards."""
    from huggingface_hub import constants, utils

    repo = with_card(tiny_marian_dir, tmp_path / "repo")
    hub_site(online_hub, REPO, repo, MAIN)
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1 << 12)
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    bars = (utils.tqdm.__init__, utils.tqdm.update, utils.are_progress_bars_disabled())
    out = tmp_path / "checkpoints"
    assert pull.cli([REPO, "--progress", "json", "--no-verify", "--out-dir", str(out)]) == 0
    said = capsys.readouterr()
    assert (utils.tqdm.__init__, utils.tqdm.update, utils.are_progress_bars_disabled()) == bars
    assert said.err.startswith(f"wrote {out / 'opus-mt-fr-en'} from {REPO}@{MAIN}")
    lines = [json.loads(x) for x in said.out.splitlines()]
    assert lines[0] == {"phase": "resolve", "spec": REPO}
    assert lines[-1] == {
        "phase": "done",
        "checkpoint": str((out / "opus-mt-fr-en").absolute()),
        "source": REPO,
        "version": MAIN,
    }
    sizes = {f.name: f.stat().st_size for f in repo.iterdir()}
    read = [*pull.FILES["marian"], "model.safetensors"]
    counts = downloads(said.out)
    assert sorted(counts) == sorted(name for name in read if name in sizes)
    for name, seen in counts.items():
        dones = [done for done, _ in seen]
        assert {total for _, total in seen} == {sizes[name]}
        assert dones[0] == 0
        assert dones[-1] == sizes[name]
        assert dones == sorted(set(dones))
    assert len(counts["model.safetensors"]) > sizes["model.safetensors"] >> 12  # every chunk: INTERVAL is 0

    assert (
        pull.cli([REPO, "--progress", "json", "--no-verify", "--out-dir", str(out), "--name", "again"]) == 0
    )
    counts = downloads(capsys.readouterr().out)
    assert counts == {name: [(sizes[name], sizes[name])] for name in read if name in sizes}
    assert all(method == "GET" or "/resolve/" in path for method, path in online_hub.asked)


def test_progress_json_offline_and_failing(
    tiny_marian_dir: Path, tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the cache alone: one event per file; a failure: the error event last, stderr's line, and the
    hub's bars put back."""
    from huggingface_hub import utils

    bars = (utils.tqdm.__init__, utils.tqdm.update, utils.are_progress_bars_disabled())
    publish(hub, REPO, tiny_marian_dir, MAIN)
    out = tmp_path / "checkpoints"
    assert pull.cli([REPO, "--progress", "json", "--no-verify", "--out-dir", str(out)]) == 0
    counts = downloads(capsys.readouterr().out)
    sizes = {f.name: f.stat().st_size for f in tiny_marian_dir.iterdir() if f.is_file()}
    assert counts == {
        n: [(sizes[n], sizes[n])] for n in [*pull.FILES["marian"], "model.safetensors"] if n in sizes
    }
    assert pull.cli(["org/absent", "--progress", "json", "--out-dir", str(out)]) == 1
    said = capsys.readouterr()
    message = said.err.removeprefix("error: pull org/absent: ").rstrip("\n")
    assert [json.loads(x) for x in said.out.splitlines()] == [
        {"phase": "resolve", "spec": "org/absent"},
        {"phase": "error", "message": message},
    ]
    assert (utils.tqdm.__init__, utils.tqdm.update, utils.are_progress_bars_disabled()) == bars


@pytest.mark.parametrize(
    ("desc", "name"),
    [
        ("model.safetensors", "model.safetensors"),  # displayed_filename, or the Content-Disposition's
        ("(…)aaaaaaaaaaaaaaaaaaaaaa/model.safetensors", "model.safetensors"),  # a URL, its last 40 characters
        ("(…)/source.spm", "source.spm"),
        ("(…)ntencepiece.bpe.model", "sentencepiece.bpe.model"),
        ("sentencepiece.bpe.mo(…)", "sentencepiece.bpe.model"),  # Xet shortens the other end
        ("other.bin", "other.bin"),
    ],
)
def test_a_hub_bar_is_named_by_its_file(desc: str, name: str) -> None:
    from training.hub_progress import file_of

    names = [
        "config.json",
        "README.md",
        "source.spm",
        "target.spm",
        "sentencepiece.bpe.model",
        "model.safetensors",
    ]
    assert file_of(desc, names) == name

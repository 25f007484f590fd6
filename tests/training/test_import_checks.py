"""`python -m training import`: languages from flags, name or tokens, and the check that refuses (exit 1,
one line, nothing written) a checkpoint the server's loader would refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from training import imports
from training.import_marian import resolve_languages

ZLE = {">>bel<<": 2, ">>rus<<": 3, ">>ukr<<": 4}


@pytest.mark.parametrize(
    ("path", "vocab", "flags", "want"),
    [
        ("opus-mt-fr-en", {}, (None, None), (["fr"], ["en"])),
        ("opus-mt-tc-big-fr-en", {}, (None, None), (["fr"], ["en"])),  # not tc -> big
        ("opus-mt-tc-big-en-zle", ZLE, (None, None), (["en"], ["be", "ru", "uk"])),  # a group: its tokens
        ("opus-mt-en-ROMANCE", {">>fr<<": 2, ">>es<<": 3}, (None, None), (["en"], ["es", "fr"])),
        ("opus-mt-tc-big-en-cat_oci_spa", {}, (None, None), (["en"], ["ca", "oc", "es"])),  # ISO 639-3
        ("opus-mt-mul-en", {}, (["fr", "de"], None), (["fr", "de"], ["en"])),
        ("models--Helsinki-NLP--opus-mt-tc-big-fr-en/snapshots/0123abcd", {}, (None, None), (["fr"], ["en"])),
        ("my-model", ZLE, (["en"], None), (["en"], ["be", "ru", "uk"])),  # no name: the tokens
        ("opus-mt-fr-en", {}, (["fr"], ["de"]), (["fr"], ["de"])),  # the flags win
    ],
)
def test_languages_from_flags_name_or_tokens(
    tmp_path: Path, path: str, vocab: dict[str, int], flags: tuple, want: tuple
) -> None:
    folder = tmp_path / path
    assert resolve_languages(folder, {}, vocab, *flags) == want


def test_name_or_path_in_config(tmp_path: Path) -> None:
    assert resolve_languages(
        tmp_path / "x", {"_name_or_path": "Helsinki-NLP/opus-mt-de-en"}, {}, None, None
    ) == (
        ["de"],
        ["en"],
    )


@pytest.mark.parametrize(
    ("name", "vocab", "message"),
    [
        ("my-model", {}, "cannot read the languages from 'my-model' (expected opus-mt-SRC-TGT or "
         "opus-mt-tc-big-SRC-TGT): give --source-lang and --target-lang"),
        ("my-model", ZLE, "cannot read the languages from 'my-model' (expected opus-mt-SRC-TGT or "
         "opus-mt-tc-big-SRC-TGT): give --source-lang"),
        ("opus-mt-mul-en", {}, "source 'mul' is a language group: give --source-lang with the languages to serve"),
        ("opus-mt-en-ROMANCE", {}, "target 'ROMANCE' is a language group and vocab.json has no >>xxx<< tokens: "
         "give --target-lang"),
    ],
)  # fmt: skip
def test_unreadable_names_need_flags_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, vocab: dict[str, int], message: str
) -> None:
    """Through the CLI: exit 1, one line on stderr naming the flag to give; nothing written."""
    folder = tmp_path / "downloads" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "marian", "vocab_size": 5}))
    (folder / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, **vocab}))
    for spm in ("source.spm", "target.spm"):
        (folder / spm).write_bytes(b"")
    out = tmp_path / "checkpoints"
    assert imports.cli(["marian", str(folder), "--name", "m", "--out-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err
    assert not out.exists() or list(out.iterdir()) == []


def test_import_refuses_what_the_loader_refuses(
    tiny_marian_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A download whose config.json contradicts its vocab.json (eos_token_id is <unk>'s id): the loader
    would refuse the checkpoint, so the import fails with its reason and writes nothing, not even a stage."""
    folder = tmp_path / "opus-mt-fr-en"
    shutil.copytree(tiny_marian_dir, folder)
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, "eos_token_id": 1}))
    out = tmp_path / "checkpoints"
    assert imports.cli(["marian", str(folder), "--name", "opus-mt-fr-en", "--out-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "the server's loader refuses the result" in err
    assert "'eos_id': (0, 1)" in err
    assert str(out / "opus-mt-fr-en") in err  # the final path, not the staging folder's
    assert list(out.iterdir()) == []
    assert (
        imports.cli(["marian", str(tiny_marian_dir), "--name", "opus-mt-fr-en", "--out-dir", str(out)]) == 0
    )
    assert [p.name for p in out.iterdir()] == ["opus-mt-fr-en"]
    assert (
        imports.cli(["marian", str(tiny_marian_dir), "--name", "opus-mt-fr-en", "--out-dir", str(out)]) == 1
    )
    assert "already exists (--force replaces it)" in capsys.readouterr().err


def test_verify_compares_with_transformers(
    tiny_marian_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    argv = ["marian", str(tiny_marian_dir), "--name", "m", "--out-dir", str(tmp_path), "--verify"]
    assert imports.cli(argv) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("verify: 8 sentences -> en; source ids 8/8 equal; logits: largest difference ")
    assert line.endswith("greedy outputs 8/8 equal: OK")


def test_verify_without_transformers_says_so(
    tiny_sentiment_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from training.verify_import import verify

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert verify("marian", tiny_sentiment_checkpoint, tiny_sentiment_checkpoint, None)
    assert "transformers is not installed (pip install transformers): not compared" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["..", ".", "", "/abs/dir", "a/b", "../x", ".hidden", "a\\b", "x" * 101])
def test_a_name_is_one_folder_inside_out_dir(
    tiny_marian_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """--name ".." with --force once emptied --out-dir's parent, "" replaced --out-dir itself and "/abs"
    wrote outside it: every name that is not one plain folder is refused before anything is touched."""
    out = tmp_path / "x" / "sub"
    out.mkdir(parents=True)
    (out / "keep").write_text("mine")
    (tmp_path / "x" / "keep").write_text("mine")
    argv = ["marian", str(tiny_marian_dir), "--name", name, "--out-dir", str(out), "--force"]
    assert imports.cli(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "a checkpoint name is 1 to 100 letters, digits, '.', '_' or '-'" in err
    assert sorted(p.name for p in out.iterdir()) == ["keep"]
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["keep", "sub"]


def test_force_replaces_a_checkpoint_and_nothing_else(
    tiny_marian_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "checkpoints"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    (out / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    for name in ("notes", "link"):
        argv = ["marian", str(tiny_marian_dir), "--name", name, "--out-dir", str(out), "--force"]
        assert imports.cli(argv) == 1
        err = capsys.readouterr().err
        assert "exists and is not a checkpoint folder (no config.json): not replaced" in err
    assert (out / "notes" / "todo.txt").read_text() == "mine"
    assert (out / "link").is_symlink()
    argv = ["marian", str(tiny_marian_dir), "--name", "m", "--out-dir", str(out)]
    assert imports.cli(argv) == 0
    first = (out / "m" / "config.json").read_text()
    assert imports.cli([*argv, "--force"]) == 0  # a checkpoint is replaced, and nothing is left beside it
    assert json.loads((out / "m" / "config.json").read_text())["files"] == json.loads(first)["files"]
    assert sorted(p.name for p in out.iterdir()) == ["link", "m", "notes"]


def _bad_download(src: Path, dst: Path, case: str) -> None:
    shutil.copytree(src, dst)
    hf = json.loads((dst / "config.json").read_text())
    if case == "pickle":  # a pytorch_model.bin that runs code when unpickled: weights_only refuses it
        import pickle

        class Evil:
            def __reduce__(self) -> tuple:
                return (print, ("pwned",))

        (dst / "model.safetensors").unlink()
        (dst / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    elif case == "truncated":
        data = (dst / "model.safetensors").read_bytes()
        (dst / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif case == "string d_model":
        (dst / "config.json").write_text(json.dumps({**hf, "d_model": str(hf["d_model"])}))
    elif case == "no vocab_size":
        (dst / "config.json").write_text(json.dumps({k: v for k, v in hf.items() if k != "vocab_size"}))


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("pickle", "pytorch_model.bin"),
        ("truncated", "model.safetensors"),
        ("string d_model", "d_model"),
        ("no vocab_size", "missing key 'vocab_size'"),
    ],
)
def test_every_refusal_is_one_line(
    tiny_marian_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, reason: str
) -> None:
    """These ended in 31-34 lines of traceback (or in a bare 'vocab_size'): now exit 1, one line with the
    reason, nothing written."""
    folder = tmp_path / "opus-mt-fr-en"
    _bad_download(tiny_marian_dir, folder, case)
    out = tmp_path / "checkpoints"
    assert imports.cli(["marian", str(folder), "--name", "m", "--out-dir", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"error: import marian {folder}: ")
    assert reason in captured.err
    assert "pwned" not in captured.out
    assert not out.exists() or list(out.iterdir()) == []

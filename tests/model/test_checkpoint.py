"""Checkpoint format: exact round trips, tied weights, no pickle, and errors that name the bad file."""

from __future__ import annotations

import copy
import json
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import sentencepiece as spm
import torch

from bench.tiny import train_tokenizer
from model import (
    CheckpointError,
    LoadedModel,
    SentimentClassifier,
    Translator,
    build_model,
    load_checkpoint,
    save_checkpoint,
)
from model.ngram import NgramSpec, bags
from tests.conftest import make_corpus, tiny_sentiment_config, tiny_translation_config

SRC = torch.tensor([[5, 9, 14, 30, 7], [8, 21, 6, 0, 0]])
TGT_IN = torch.tensor([[2, 11, 12, 13], [2, 40, 41, 0]])


def outputs(model: SentimentClassifier | Translator) -> torch.Tensor:
    with torch.no_grad():
        if isinstance(model, Translator):
            return model(SRC, TGT_IN)
        if model.ngram is None:
            return model(SRC)
        return model(
            SRC, bags(["a text", "another"], NgramSpec.parse(model.cfg.ngram), model.cfg.ngram_buckets)
        )


def make_model(task: str, vocab_size: int, seed: int = 0) -> SentimentClassifier | Translator:
    torch.manual_seed(seed)
    make_cfg = tiny_sentiment_config if task == "sentiment" else tiny_translation_config
    return build_model(make_cfg(vocab_size)).eval()


@pytest.fixture
def ckpt(tmp_path: Path, tiny_translator_checkpoint: Path) -> Path:
    """A private copy of the tiny translator checkpoint, free to corrupt."""
    return Path(shutil.copytree(tiny_translator_checkpoint, tmp_path / "translate-fr-en"))


def edit_config(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    meta = json.loads((path / "config.json").read_text())
    change(meta)
    (path / "config.json").write_text(json.dumps(meta))


def load_error(ckpt: Path, file: Path) -> str:
    """Loading `ckpt` raises a CheckpointError "<file>: <reason>"; returns the reason."""
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(ckpt)
    message = str(info.value)
    assert message.startswith(f"{file}: "), message
    return message.removeprefix(f"{file}: ")  # tmp dirs are named after tests: check words after the path


# --- round trips -----------------------------------------------------------------------------------------


def test_save_writes_the_directory_format(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> None:
    model = make_model("translation", tiny_vocab_size)
    out = save_checkpoint(
        tmp_path / "ck",
        model,
        tiny_tokenizer_path,
        training={"steps": 3},
        metrics={"bleu": 1.5},
        card="# ck\n",
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "config.json",
        "metrics.json",
        "model.safetensors",
        "tokenizer.model",
    ]
    meta = json.loads((out / "config.json").read_text())
    assert meta["format"] == "transformer-serving/1"
    assert meta["task"] == "translation"
    assert meta["dtype"] == "float16"  # the default
    assert meta["training"] == {"steps": 3}
    assert meta["model"] == json.loads(json.dumps(model.cfg.to_dict()))
    assert set(meta["files"]) == {"model.safetensors", "tokenizer.model"}
    assert json.loads((out / "metrics.json").read_text()) == {"bleu": 1.5}
    assert (out / "tokenizer.model").read_bytes() == tiny_tokenizer_path.read_bytes()


@pytest.mark.parametrize("task", ["sentiment", "translation"])
def test_fp32_round_trip_is_exact(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int, task: str
) -> None:
    model = make_model(task, tiny_vocab_size)
    save_checkpoint(tmp_path / "ck", model, tiny_tokenizer_path, dtype=torch.float32)
    loaded = load_checkpoint(tmp_path / "ck")
    assert type(loaded.model) is type(model)
    assert loaded.config == model.cfg
    assert not loaded.model.training
    assert torch.equal(outputs(loaded.model), outputs(model))
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


def test_fp16_checkpoint_loads_close_to_the_rounded_model(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int
) -> None:
    model = make_model("translation", tiny_vocab_size)
    save_checkpoint(tmp_path / "ck", model, tiny_tokenizer_path, dtype=torch.float16)
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())
    loaded = load_checkpoint(tmp_path / "ck")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    torch.testing.assert_close(outputs(loaded.model), outputs(rounded), atol=1e-5, rtol=1e-5)
    assert not torch.equal(outputs(loaded.model), outputs(model))  # it really was rounded
    tensors = safetensors.torch.load_file(tmp_path / "ck" / "model.safetensors")
    assert {t.dtype for t in tensors.values()} == {torch.float16}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_load_casts_to_the_requested_dtype(tiny_translator_checkpoint: Path, dtype: torch.dtype) -> None:
    loaded = load_checkpoint(tiny_translator_checkpoint, dtype=dtype)
    assert {p.dtype for p in loaded.model.parameters()} == {dtype}
    assert outputs(loaded.model).dtype == dtype


def test_tied_embeddings_survive_save_and_load(tiny_translator_checkpoint: Path) -> None:
    tensors = safetensors.torch.load_file(tiny_translator_checkpoint / "model.safetensors")
    assert "src_embed.token.weight" in tensors
    assert "tgt_embed.token.weight" not in tensors  # aliases are not stored twice
    assert "generator.weight" not in tensors
    model = load_checkpoint(tiny_translator_checkpoint).model
    assert isinstance(model, Translator)
    shared = model.src_embed.token.weight
    assert model.tgt_embed.token.weight is shared
    assert model.generator.weight is shared
    assert torch.equal(shared, tensors["src_embed.token.weight"])


def test_loaded_model_record(tiny_translator_checkpoint: Path, tiny_tokenizer_path: Path) -> None:
    loaded = load_checkpoint(tiny_translator_checkpoint)
    assert isinstance(loaded, LoadedModel)
    assert loaded.name == "translate-fr-en"
    assert loaded.path == tiny_translator_checkpoint
    assert loaded.meta["files"]["model.safetensors"]["sha256"] == loaded.sha256
    assert loaded.num_parameters == sum(p.numel() for p in loaded.model.parameters())
    assert loaded.tokenizer.vocab_size == loaded.config.vocab_size
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(tiny_tokenizer_path.read_bytes())
    text = "Le chat aime la maison."
    assert loaded.tokenizer.encode(text, add_bos=True, add_eos=True) == [2, *sp.encode(text), 3]
    assert loaded.tokenizer.decode(loaded.tokenizer.encode(text)) == text


def test_shared_fixture_checkpoints_load(
    tiny_sentiment_checkpoint: Path, tiny_sentiment_ko_checkpoint: Path, tiny_translator_checkpoint: Path
) -> None:
    en, ko = load_checkpoint(tiny_sentiment_checkpoint), load_checkpoint(tiny_sentiment_ko_checkpoint)
    assert (en.name, ko.name) == ("sentiment-en", "sentiment-ko")
    assert en.config.labels == ("negative", "positive")
    assert not torch.equal(outputs(en.model), outputs(ko.model))  # different seeds
    ids = ko.tokenizer.encode("이 영화 정말 좋았어요")
    assert ko.tokenizer.unk_id not in ids  # Hangul is covered by the tiny tokenizer
    assert load_checkpoint(tiny_translator_checkpoint).config.source_langs == ("fr",)


def test_loading_never_unpickles(monkeypatch: pytest.MonkeyPatch, tiny_translator_checkpoint: Path) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("checkpoint loading must not unpickle")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    loaded = load_checkpoint(tiny_translator_checkpoint)
    assert outputs(loaded.model).shape == (2, 4, loaded.config.vocab_size)


# --- errors name the file --------------------------------------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    assert "directory does not exist" in load_error(tmp_path / "nope", tmp_path / "nope")


def test_missing_config(ckpt: Path) -> None:
    (ckpt / "config.json").unlink()
    assert "file is missing" in load_error(ckpt, ckpt / "config.json")


def test_invalid_json(ckpt: Path) -> None:
    (ckpt / "config.json").write_text('{"format": "transformer-serving/1", ')
    assert "not valid JSON" in load_error(ckpt, ckpt / "config.json")


def test_wrong_format(ckpt: Path) -> None:
    edit_config(ckpt, lambda m: m.update(format="other/9"))
    assert "not a transformer-serving/1 config" in load_error(ckpt, ckpt / "config.json")


def test_unknown_model_config_key(ckpt: Path) -> None:
    edit_config(ckpt, lambda m: m["model"].update(n_experts=8))
    assert "unknown model config keys: ['n_experts']" in load_error(ckpt, ckpt / "config.json")


def test_invalid_model_config_value(ckpt: Path) -> None:
    edit_config(ckpt, lambda m: m["model"].update(n_heads=5))
    assert "must be divisible by n_heads=5" in load_error(ckpt, ckpt / "config.json")


def test_missing_weights(ckpt: Path) -> None:
    (ckpt / "model.safetensors").unlink()
    assert "file is missing" in load_error(ckpt, ckpt / "model.safetensors")


def test_truncated_weights(ckpt: Path) -> None:
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    reason = load_error(ckpt, ckpt / "model.safetensors")
    assert f"{len(data) // 2} bytes, config.json records {len(data)} (truncated" in reason


def test_truncated_weights_without_a_files_record(ckpt: Path) -> None:
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    edit_config(ckpt, lambda m: m.pop("files"))
    assert "not a valid safetensors file" in load_error(ckpt, ckpt / "model.safetensors")


def test_flipped_byte_fails_the_sha256_check(ckpt: Path) -> None:
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-100] ^= 0x01  # inside the tensor data: still a well-formed safetensors file
    (ckpt / "model.safetensors").write_bytes(bytes(data))
    assert "sha256 differs" in load_error(ckpt, ckpt / "model.safetensors")


def test_wrong_tensor_shape(ckpt: Path) -> None:
    def change(m: dict[str, Any]) -> None:
        m["model"]["d_ff"] = 48
        m.pop("files")

    edit_config(ckpt, change)
    reason = load_error(ckpt, ckpt / "model.safetensors")
    assert "has shape (64, 32), config.json implies (48, 32)" in reason


def test_missing_tensor(ckpt: Path) -> None:
    tensors = safetensors.torch.load_file(ckpt / "model.safetensors")
    del tensors["decoder.norm.weight"]
    safetensors.torch.save_file(tensors, ckpt / "model.safetensors")
    edit_config(ckpt, lambda m: m.pop("files"))
    assert "missing ['decoder.norm.weight']" in load_error(ckpt, ckpt / "model.safetensors")


def test_missing_tokenizer(ckpt: Path) -> None:
    (ckpt / "tokenizer.model").unlink()
    assert "file is missing" in load_error(ckpt, ckpt / "tokenizer.model")


def test_corrupt_tokenizer(ckpt: Path) -> None:
    (ckpt / "tokenizer.model").write_bytes(b"not a protobuf at all \xff\xfe")
    edit_config(ckpt, lambda m: m.pop("files"))
    assert "not a valid sentencepiece model" in load_error(ckpt, ckpt / "tokenizer.model")


def test_tokenizer_vocab_size_mismatch(ckpt: Path, tmp_path: Path) -> None:
    small = train_tokenizer(tmp_path, 120, make_corpus(100, seed=1), name="small")
    shutil.copyfile(small, ckpt / "tokenizer.model")
    edit_config(ckpt, lambda m: m.pop("files"))
    reason = load_error(ckpt, ckpt / "tokenizer.model")
    assert "vocabulary of 120 pieces, config.json says vocab_size=200" in reason

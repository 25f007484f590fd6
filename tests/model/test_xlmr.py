"""XLM-R classifier import: ours against transformers' XLMRobertaForSequenceClassification on a tiny random
model built here: input ids equal XLMRobertaTokenizer's, probabilities within 1e-4 over padded batches,
identical labels; .bin weights read with weights_only=True give the same checkpoint."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from model.checkpoint import LoadedModel, load_checkpoint
from model.inference import classify_ids
from model.preprocess import classifier_ids, pad_ids
from model.xlmr import XLMRClassifier
from training import imports

pytest.importorskip("transformers")

TEXTS = ["Le chat aime la maison.", "The dog sees a book!", "Zébulon 😀 xyz ?", "", "a " * 80]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_xlmr import build_xlmr

    return build_xlmr(tmp_path_factory.mktemp("hf") / "xlm-roberta-sentiment")


@pytest.fixture(scope="module")
def imported(hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    out = tmp_path_factory.mktemp("ours")
    argv = [
        "xlm-roberta",
        str(hf_dir),
        "--name",
        "sentiment-xlmr",
        "--out-dir",
        str(out),
        "--lang",
        "en",
        "fr",
    ]
    assert imports.cli(argv) == 0
    assert (
        (out / "sentiment-xlmr" / "README.md").read_text().startswith("# sentiment-xlmr\n")
    )  # not the stage's
    assert [p.name for p in out.iterdir()] == ["sentiment-xlmr"]  # no staging folder left
    return load_checkpoint(out / "sentiment-xlmr")


@pytest.fixture(scope="module")
def reference(hf_dir: Path):  # noqa: ANN201
    from tests.tiny_xlmr import load_reference

    return load_reference(hf_dir)


def random_texts(n: int, seed: int) -> list[str]:
    from tests.tiny_marian import french_english

    fr, en = french_english(200, seed)
    g = random.Random(seed)
    return [" ".join(g.choice(fr + en) for _ in range(g.randint(1, 4))) for _ in range(n)]


def test_config_and_labels(imported: LoadedModel) -> None:
    cfg = imported.config
    assert isinstance(imported.model, XLMRClassifier)
    assert (cfg.architecture, cfg.labels, cfg.source_langs) == (
        "xlm-roberta",
        ("negative", "neutral", "positive"),
        ("en", "fr"),
    )
    assert (cfg.bos_id, cfg.pad_id, cfg.eos_id, cfg.unk_id, cfg.cls_id, cfg.max_len) == (0, 1, 2, 3, 0, 64)
    assert imported.meta["origin"] == "xlm-roberta"


def test_input_ids_equal_xlmroberta_tokenizer(imported: LoadedModel, reference) -> None:  # noqa: ANN001
    tok, cfg = reference[1], imported.config
    for text in TEXTS + random_texts(20, 1):
        assert (
            classifier_ids(imported.tokenizer, text, cfg)
            == tok(text, truncation=True, max_length=cfg.max_len)["input_ids"]
        )
    ids = classifier_ids(imported.tokenizer, TEXTS[2], cfg)
    assert imported.tokenizer.pieces(ids) == tok.convert_ids_to_tokens(ids)


def test_probabilities_equal_transformers(imported: LoadedModel, reference) -> None:  # noqa: ANN001
    """64 texts of varied lengths, in padded batches of 8 (ours sorts by length and buckets): within 1e-4,
    the same labels; the classes are far from uniform, so the labels are a real check."""
    model, tok = reference
    cfg = imported.config
    texts = TEXTS + random_texts(59, 2)
    seqs = [classifier_ids(imported.tokenizer, t, cfg) for t in texts]
    ours = classify_ids(imported.model, seqs, batch_size=8)  # type: ignore[arg-type]
    theirs = []
    for i in range(0, len(seqs), 8):
        ids = pad_ids(seqs[i : i + 8], cfg.pad_id)
        with torch.inference_mode():
            theirs.append(model(input_ids=ids, attention_mask=(ids != cfg.pad_id).long()).logits.softmax(-1))
    want = torch.cat(theirs)
    assert (ours - want).abs().max() < 1e-4
    assert ours.argmax(-1).tolist() == want.argmax(-1).tolist()
    assert len(set(want.argmax(-1).tolist())) >= 2
    assert want.max(-1).values.mean() > 0.6


def test_bin_weights_import_the_same(hf_dir: Path, imported: LoadedModel, tmp_path: Path) -> None:
    from tests.tiny_xlmr import build_xlmr

    folder = build_xlmr(tmp_path / "bin", safetensors=False)
    assert (folder / "pytorch_model.bin").is_file()
    assert not (folder / "model.safetensors").exists()
    assert (
        imports.cli(["xlm-roberta", str(folder), "--name", "b", "--out-dir", str(tmp_path), "--lang", "en"])
        == 0
    )
    got = load_checkpoint(tmp_path / "b").model.state_dict()
    assert all(torch.equal(v, got[k]) for k, v in imported.model.state_dict().items())


def test_verify_prints_the_largest_difference(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["xlm-roberta", str(hf_dir), "--name", "v", "--out-dir", str(tmp_path), "--lang", "en", "--verify"]
    assert imports.cli(argv) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("verify: 8 texts; input ids 8/8 equal; probabilities: largest difference ")
    assert line.endswith("labels 8/8 equal: OK")


def test_languages_are_required(hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert imports.cli(["xlm-roberta", str(hf_dir), "--name", "x", "--out-dir", str(tmp_path)]) == 1
    assert "give --lang with the languages it classifies" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("eps", [1e-12, 1e-3])
def test_layer_norm_eps_is_read_from_the_config(tmp_path: Path, eps: float) -> None:
    """A published config's layer_norm_eps (transformers' default 1e-12, or another) is the model's: the
    probabilities match transformers' within 1e-4 (1e-3 read as 1e-5 moves them by more)."""
    from tests.tiny_xlmr import build_xlmr, load_reference

    folder = build_xlmr(tmp_path / "hf", seed=3, layer_norm_eps=eps)
    argv = ["xlm-roberta", str(folder), "--name", "eps", "--out-dir", str(tmp_path / "ours"), "--lang", "en"]
    assert imports.cli(argv) == 0
    ours = load_checkpoint(tmp_path / "ours" / "eps")
    assert ours.config.layer_norm_eps == eps
    model, _ = load_reference(folder)
    seqs = [classifier_ids(ours.tokenizer, t, ours.config) for t in TEXTS + random_texts(11, 4)]
    got = classify_ids(ours.model, seqs, batch_size=1)  # type: ignore[arg-type]
    with torch.inference_mode():
        want = torch.cat([model(input_ids=torch.tensor([s])).logits.softmax(-1) for s in seqs])
    assert (got - want).abs().max() < 1e-4

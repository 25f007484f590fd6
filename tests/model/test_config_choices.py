"""The Transformer-family choices of ModelConfig (issue 27): each field does what it names, and a config
without them (every shipped checkpoint) keeps today's model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import ModelConfig, Translator, build_model
from model.layers import Embeddings, FeedForward, sinusoids
from model.preprocess import source_ids
from model.tokenizer import PairTokenizer, Tokenizer
from tests.conftest import tiny_sentiment_config, tiny_translation_config

CHECKPOINTS = Path(__file__).parents[2] / "checkpoints"
NEW_FIELDS = {
    "activation": "relu",
    "scale_embeddings": True,
    "positions": "interleaved",
    "logits_bias": False,
    "decoder_start_id": None,
    "target_lang_position": "decoder",
}


@pytest.mark.parametrize("name", ["translate-fr-en", "translate-de-en", "translate-es-en", "sentiment-en"])
def test_shipped_configs_get_todays_behaviour(name: str) -> None:
    meta = json.loads((CHECKPOINTS / name / "config.json").read_text())
    assert not set(NEW_FIELDS) & set(meta["model"])  # written before these fields existed
    cfg = ModelConfig.from_dict(meta["model"])
    assert {k: getattr(cfg, k) for k in NEW_FIELDS} == NEW_FIELDS
    if cfg.task == "translation":
        assert cfg.start_id() == cfg.bos_id
        assert cfg.source_prefix() == []


def test_positions_layouts() -> None:
    """interleaved: sin on even, cos on odd dims; sin_cos: Marian's table (transformers' formula)."""
    length, d = 50, 16
    pos = np.arange(length)[:, None] / np.power(10000, 2 * (np.arange(d) // 2) / d)[None]  # (L, D)
    marian = np.concatenate([np.sin(pos[:, 0::2]), np.cos(pos[:, 1::2])], axis=1)
    assert torch.allclose(
        sinusoids(length, d, "sin_cos"), torch.tensor(marian, dtype=torch.float32), atol=1e-6
    )
    inter = sinusoids(length, d)
    assert torch.allclose(inter[:, 0::2], torch.tensor(np.sin(pos[:, 0::2]), dtype=torch.float32), atol=1e-4)
    assert torch.allclose(inter[:, 1::2], torch.tensor(np.cos(pos[:, 1::2]), dtype=torch.float32), atol=1e-4)


def test_embedding_scale() -> None:
    torch.manual_seed(0)
    ids = torch.tensor([[3, 4, 5]])
    for scale, factor in ((True, math.sqrt(8)), (False, 1.0)):
        emb = Embeddings(10, 8, 16, 0.0, scale=scale).eval()
        want = emb.token(ids) * factor + emb.pe[:3]
        assert torch.allclose(emb(ids), want)


@pytest.mark.parametrize("make", [tiny_sentiment_config, tiny_translation_config])
@pytest.mark.parametrize("choice", [{"scale_embeddings": False}, {"positions": "sin_cos"}])
def test_both_models_embed_as_their_config_says(make: object, choice: dict) -> None:
    """The classifier and the translator build their embeddings from the config alike: scale_embeddings and
    positions change what the encoder sees, never the weights' names or shapes."""
    ids = torch.tensor([[5, 6, 7, 8, 3]])
    default, chosen = make(50), make(50, **choice)  # type: ignore[operator]
    hidden, shapes = [], []
    for cfg in (default, chosen):
        torch.manual_seed(0)
        model = build_model(cfg).eval()
        want = Embeddings.from_config(cfg)
        embeds = [m for m in model.modules() if isinstance(m, Embeddings)]
        assert len(embeds) == (1 if cfg.task == "sentiment" else 2)
        assert all(e.scale == want.scale and torch.equal(e.pe, want.pe) for e in embeds)
        hidden.append(model.encode(ids)[0])
        shapes.append({k: v.shape for k, v in model.state_dict().items()})
    assert shapes[0] == shapes[1]
    assert not torch.allclose(hidden[0], hidden[1])


@pytest.mark.parametrize(("name", "fn"), [("relu", F.relu), ("gelu", F.gelu), ("swish", F.silu)])
def test_activation(name: str, fn: object) -> None:
    torch.manual_seed(0)
    ff = FeedForward(8, 16, 0.0, name).eval()
    x = torch.randn(2, 3, 8)
    linear1, linear2 = ff.net[0], ff.net[3]
    assert torch.allclose(ff(x), linear2(fn(linear1(x))))  # type: ignore[operator]
    with pytest.raises(ValueError, match="activation must be relu, gelu or swish"):
        tiny_translation_config(50, activation="tanh")


def test_logits_bias_adds_to_every_step() -> None:
    torch.manual_seed(0)
    model = Translator(tiny_translation_config(50, logits_bias=True)).eval()
    assert model.generator.bias is not None
    src, tgt = torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]])
    before = model(src, tgt)
    with torch.no_grad():
        model.generator.bias.fill_(0.5)
    assert torch.allclose(model(src, tgt), before + 0.5)
    assert Translator(tiny_translation_config(50)).generator.bias is None  # ours: no bias


def test_decoder_start_id_is_the_first_token_and_never_emitted() -> None:
    cfg = tiny_translation_config(50, decoder_start_id=0)  # Marian: <pad>
    assert cfg.start_id() == 0
    assert 0 in Translator(cfg).banned.tolist()
    with pytest.raises(ValueError, match="decoder_start_id=60 is outside the vocabulary"):
        tiny_translation_config(50, decoder_start_id=60)


def test_target_tag_on_the_source_side(tiny_tokenizer_path: Path) -> None:
    """target_lang_position="source": the tag leads the source (room kept within max_len), the decoder
    starts from decoder_start_id and may emit the tags (they are vocabulary entries to it)."""
    tags = {"es": 4, "it": 5}
    cfg = tiny_translation_config(
        200, target_langs=("es", "it"), target_lang_ids=tags, target_lang_position="source", max_len=6
    )
    assert cfg.source_prefix("it") == [5]
    assert cfg.start_id("it") == cfg.bos_id
    assert not {4, 5} & set(Translator(cfg).banned.tolist())
    ids = source_ids(Tokenizer(tiny_tokenizer_path), "the cat likes the house very much", cfg)
    assert len(ids) == cfg.max_source_len == cfg.max_len - 1  # + the tag = max_len
    decoder_side = tiny_translation_config(200, target_langs=("es", "it"), target_lang_ids=tags)
    assert decoder_side.source_prefix("it") == []
    assert decoder_side.start_id("it") == 5


def test_pair_tokenizer_shares_one_vocabulary(tiny_tokenizer_path: Path) -> None:
    """Source pieces -> vocab.json ids; ids -> target pieces -> text; special pieces dropped."""
    sp = Tokenizer(tiny_tokenizer_path)
    pieces = [sp.sp.id_to_piece(i) for i in range(4, sp.vocab_size)]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    tok = PairTokenizer(tiny_tokenizer_path, tiny_tokenizer_path, vocab)
    assert (tok.eos_id, tok.unk_id, tok.pad_id, tok.bos_id) == (0, 1, len(vocab) - 1, len(vocab) - 1)
    ids = tok.encode("the cat likes the house")
    assert ids == [vocab[p] for p in sp.sp.encode("the cat likes the house", out_type=str)]
    assert tok.decode([*ids, 0, tok.pad_id]) == "the cat likes the house"
    with pytest.raises(ValueError, match="without gaps"):
        PairTokenizer(tiny_tokenizer_path, tiny_tokenizer_path, {"</s>": 0, "<unk>": 2})

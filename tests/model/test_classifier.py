"""SentimentClassifier: shapes, padding invariance, pooling, predict."""

from __future__ import annotations

import pytest
import torch

from model import ModelConfig, SentimentClassifier, pad_ids
from tests.conftest import tiny_sentiment_config

V = 60


def make_classifier(seed: int = 0, **overrides: object) -> SentimentClassifier:
    torch.manual_seed(seed)
    return SentimentClassifier(tiny_sentiment_config(V, **overrides)).eval()


def random_seqs(lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, V, (n,), generator=g).tolist() for n in lengths]


def test_forward_shapes() -> None:
    model = make_classifier()
    ids = pad_ids(random_seqs([5, 9, 2]), pad_id=0)
    assert model(ids).shape == (3, 2)
    hidden, mask, weights = model.encode(ids, need_weights=True)
    assert hidden.shape == (3, 9, 32)
    assert mask.shape == (3, 1, 1, 9)
    assert [w.shape for w in weights] == [(3, 2, 9, 9)] * 2
    assert model.mlm_logits(hidden).shape == (3, 9, V)


def test_predict_returns_float32_probabilities_without_grad() -> None:
    model = make_classifier()
    probs = model.predict(pad_ids(random_seqs([5, 9]), pad_id=0))
    assert probs.dtype == torch.float32
    assert not probs.requires_grad
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))


def test_labels_define_the_head() -> None:
    model = make_classifier(labels=("neg", "neutral", "pos"))
    assert model(torch.tensor([[5, 6, 7]])).shape == (1, 3)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_logits_are_padding_invariant(norm_first: bool, pooling: str) -> None:
    cls_id = 4 if pooling == "cls" else None
    model = make_classifier(norm_first=norm_first, pooling=pooling, cls_id=cls_id)
    seqs = random_seqs([4, 11, 7, 1], seed=1)
    if cls_id is not None:
        seqs = [[cls_id, *s] for s in seqs]
    batch = model(pad_ids(seqs, pad_id=0))
    for i, s in enumerate(seqs):
        alone = model(torch.tensor([s]))
        torch.testing.assert_close(batch[i : i + 1], alone, atol=1e-5, rtol=0)


def test_padding_is_not_averaged_into_the_pooled_vector() -> None:
    model = make_classifier()
    hidden = torch.randn(2, 4, 32)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])[:, None, None, :]
    pooled = model.pool(hidden, mask)
    torch.testing.assert_close(pooled[0], hidden[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], hidden[1].mean(0))


def test_cls_pooling_needs_cls_id() -> None:
    with pytest.raises(ValueError, match="cls_id"):
        tiny_sentiment_config(V, pooling="cls")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"labels": ("only",)}, "at least 2 labels"),
        ({"d_model": 30, "n_heads": 4}, "divisible"),
        ({"eos_id": V}, "eos_id"),
        ({"task": "summarize"}, "task must be"),
    ],
)
def test_config_validation(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_sentiment_config(V, **overrides)


def test_config_round_trips_through_a_dict() -> None:
    cfg = tiny_sentiment_config(V)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    as_json_lists = cfg.to_dict() | {"labels": list(cfg.labels)}
    assert ModelConfig.from_dict(as_json_lists) == cfg
    with pytest.raises(ValueError, match="unknown model config keys: \\['colour'\\]"):
        ModelConfig.from_dict(cfg.to_dict() | {"colour": "red"})


def test_compiled_classifier_matches_eager_for_any_batch_and_length() -> None:
    """The TorchScript graph (served by default) gives the eager model's probabilities: batch sizes and
    lengths other than the trace's example, padding, several length buckets, and the longest input."""
    from model.inference import classify_ids
    from model.jit import compile_classifier

    torch.manual_seed(0)
    cfg = ModelConfig(
        task="sentiment", vocab_size=97, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=40,
        labels=("negative", "positive", "neutral"),
    )  # fmt: skip
    model = SentimentClassifier(cfg).eval()
    graph = compile_classifier(model)
    rng = torch.Generator().manual_seed(1)
    for batch, longest in ((1, 1), (1, 40), (5, 17), (33, 40), (70, 40)):
        seqs = [
            torch.randint(
                5, 97, (int(torch.randint(1, longest + 1, (1,), generator=rng)),), generator=rng
            ).tolist()
            for _ in range(batch)
        ]
        want = classify_ids(model, seqs, 64)
        got = classify_ids(model, seqs, 64, graph)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert not model.training

"""Masks, embeddings, attention (SDPA vs explicit weights), layers and the decoder KV cache."""

from __future__ import annotations

import math

import pytest
import torch

from model.jit import tracing
from model.layers import (
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    FeedForward,
    LayerCache,
    MultiHeadAttention,
    init_weights,
    make_causal_mask,
    make_padding_mask,
    softmax_rows,
)
from tests.conftest import tiny_translation_config

B, S, T, D, H = 3, 7, 5, 32, 2


def test_padding_mask_is_true_on_real_tokens() -> None:
    ids = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0]])
    mask = make_padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, True, False], [True, False, False, False]]


def test_padding_mask_uses_the_given_pad_id() -> None:
    ids = torch.tensor([[0, 9, 9]])
    assert make_padding_mask(ids, pad_id=9)[0, 0, 0].tolist() == [True, False, False]


def test_causal_mask_is_lower_triangle() -> None:
    mask = make_causal_mask(4, torch.device("cpu"))
    assert mask.shape == (1, 1, 4, 4)
    assert mask.dtype == torch.bool
    expected = [[j <= i for j in range(4)] for i in range(4)]
    assert mask[0, 0].tolist() == expected


def test_embeddings_shape_scale_and_positions() -> None:
    torch.manual_seed(0)
    emb = Embeddings(vocab_size=20, d_model=D, max_len=16, dropout=0.0)
    ids = torch.randint(0, 20, (B, T))
    x = emb(ids)
    assert x.shape == (B, T, D)
    # token * sqrt(D) + sinusoid: position 0 is sin(0)=0 / cos(0)=1 on even / odd dims
    pe0 = torch.tensor([0.0, 1.0]).repeat(D // 2)
    torch.testing.assert_close(x[:, 0], emb.token(ids[:, 0]) * math.sqrt(D) + pe0)
    # `start` offsets the positions: embedding the tail alone equals the tail of the whole
    torch.testing.assert_close(emb(ids[:, 2:], start=2), x[:, 2:])
    assert not torch.allclose(emb(ids[:, 2:]), x[:, 2:])


def test_embeddings_reject_sequences_beyond_max_len() -> None:
    emb = Embeddings(vocab_size=20, d_model=D, max_len=8, dropout=0.0)
    emb(torch.zeros(1, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds max_len=8"):
        emb(torch.zeros(1, 3, dtype=torch.long), start=6)


def test_attention_shapes_both_paths() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.0)
    x, ctx = torch.randn(B, T, D), torch.randn(B, S, D)
    out, w = mha(x, ctx, None)
    assert out.shape == (B, T, D)
    assert w is None
    out, w = mha(x, ctx, None, need_weights=True)
    assert out.shape == (B, T, D)
    assert w is not None
    assert w.shape == (B, H, T, S)
    k, v = mha.project_kv(ctx)
    assert k.shape == v.shape == (B, H, S, D // H)


def test_masked_key_gets_exactly_zero_weight() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.0)
    ctx = torch.randn(B, S, D)
    lengths = torch.tensor([S, 4, 1])
    mask = (torch.arange(S)[None] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
    _, w = mha(torch.randn(B, T, D), ctx, mask, need_weights=True)
    assert w is not None
    for b, n in enumerate(lengths.tolist()):
        assert torch.all(w[b, :, :, n:] == 0.0)
        assert torch.all(w[b, :, :, :n] > 0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T))


def test_masked_key_content_does_not_matter() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.0)
    x, ctx = torch.randn(B, T, D), torch.randn(B, S, D)
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    mask[:, ..., 4:] = False
    noisy = ctx.clone()
    noisy[:, 4:] = torch.randn(B, S - 4, D) * 100
    for need_weights in (False, True):
        a, _ = mha(x, ctx, mask, need_weights)
        b, _ = mha(x, noisy, mask, need_weights)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
def test_sdpa_and_weights_paths_agree(mask_kind: str) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.0)
    x = torch.randn(B, T, D)
    if mask_kind == "causal":
        ctx, mask = x, make_causal_mask(T, x.device)
    else:
        ctx = torch.randn(B, S, D)
        ids = torch.tensor([[1] * S, [1] * 3 + [0] * (S - 3), [1] + [0] * (S - 1)])
        mask = make_padding_mask(ids, 0) if mask_kind == "padding" else None
    fast, _ = mha(x, ctx, mask)
    slow, w = mha(x, ctx, mask, need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    if mask_kind == "causal":
        assert w is not None
        assert torch.all(w[..., ~make_causal_mask(T, x.device)[0, 0]] == 0.0)


def test_fully_masked_row_is_zero_on_both_paths() -> None:
    """An all-padding source (empty text) has no key to attend to: SDPA outputs 0, the weights path must too."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.0)
    x, ctx = torch.randn(2, T, D), torch.randn(2, S, D)
    mask = make_padding_mask(torch.tensor([[1] * S, [0] * S]), pad_id=0)
    fast, _ = mha(x, ctx, mask)
    slow, w = mha(x, ctx, mask, need_weights=True)
    assert w is not None
    assert not w.isnan().any()
    assert torch.all(w[1] == 0.0)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("row", [1, 2, 9, 15, 16, 17, 40])
def test_softmax_rows_is_softmax_at_every_row_length(row: int) -> None:
    """Short rows go padded to SHORT_ROW (the CPU's fast path): the same probabilities, the shape kept, and an
    all-masked row NaN as torch's (the weights path turns it into zeros)."""
    torch.manual_seed(0)
    scores = torch.randn(3, 2, 4, row)
    scores[0, 0, 0] = float("-inf")
    scores[1, :, :, : row // 2] = float("-inf")
    got, want = softmax_rows(scores), scores.softmax(-1)
    assert got.shape == want.shape
    # a row of 16 sums in another order than a short one: float32 rounding apart (measured up to 4.8e-7)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=0, equal_nan=True)
    assert got[0, 0, 0].isnan().all()


def test_softmax_rows_in_a_trace_keeps_its_check_for_every_row_length() -> None:
    """Traced on a short row, the padding is decided per call (a scripted check in the graph), not baked in
    at the trace's length: the graph answers as torch's softmax on rows shorter and longer than SHORT_ROW."""
    with tracing():  # the library's way: torch.jit.trace's deprecation notice silenced
        traced = torch.jit.trace(lambda s: softmax_rows(s) * 1.0, (torch.randn(2, 5),))
    assert "aten::pad" in str(traced.inlined_graph)
    torch.manual_seed(0)
    for row in (3, 5, 15, 16, 33):
        scores = torch.randn(4, row)
        got = traced(scores)
        assert got.shape == (4, row)
        torch.testing.assert_close(got, scores.softmax(-1), atol=2e-6, rtol=0)


def test_attention_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, T, D)
    mha.eval()
    torch.testing.assert_close(mha(x, x, None)[0], mha(x, x, None)[0])
    mha.train()
    assert not torch.allclose(mha(x, x, None)[0], mha(x, x, None)[0])


def test_feed_forward_is_position_wise() -> None:
    torch.manual_seed(0)
    ff = FeedForward(D, 64, dropout=0.0)
    x = torch.randn(B, T, D)
    y = ff(x)
    assert y.shape == (B, T, D)
    torch.testing.assert_close(ff(x[:, 2:3]), y[:, 2:3])


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_and_decoder_shapes(norm_first: bool) -> None:
    torch.manual_seed(0)
    cfg = tiny_translation_config(50, norm_first=norm_first, n_layers=3)
    enc, dec = Encoder(cfg), Decoder(cfg)
    src_mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    memory, weights = enc(torch.randn(B, S, D), src_mask)
    assert memory.shape == (B, S, D)
    assert weights == []
    _, weights = enc(torch.randn(B, S, D), src_mask, need_weights=True)
    assert [w.shape for w in weights] == [(B, H, S, S)] * 3
    causal = make_causal_mask(T, memory.device)
    out, w_self, w_cross = dec(torch.randn(B, T, D), memory, causal, src_mask, need_weights=True)
    assert out.shape == (B, T, D)
    assert [w.shape for w in w_self] == [(B, H, T, T)] * cfg.n_decoder_layers
    assert [w.shape for w in w_cross] == [(B, H, T, S)] * cfg.n_decoder_layers
    y, w = EncoderLayer(cfg)(torch.randn(B, S, D), src_mask)
    assert y.shape == (B, S, D)
    assert w is None
    y, ws, wc = DecoderLayer(cfg)(torch.randn(B, T, D), memory, causal, src_mask)
    assert y.shape == (B, T, D)
    assert ws is None
    assert wc is None


def test_post_norm_output_is_layer_normed() -> None:
    torch.manual_seed(0)
    cfg = tiny_translation_config(50, norm_first=False)
    layer = EncoderLayer(cfg)
    y, _ = layer(torch.randn(B, S, D) * 5 + 3, torch.ones(B, 1, 1, S, dtype=torch.bool))
    torch.testing.assert_close(y.mean(-1), torch.zeros(B, S), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(-1, unbiased=False), torch.ones(B, S), atol=1e-3, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_step_cache_matches_teacher_forcing(norm_first: bool) -> None:
    torch.manual_seed(0)
    cfg = tiny_translation_config(50, norm_first=norm_first)
    dec = Decoder(cfg).eval()
    memory = torch.randn(B, S, D)
    memory_mask = make_padding_mask(torch.tensor([[1] * S, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]), 0)
    x = torch.randn(B, T, D)
    full, _, _ = dec(x, memory, make_causal_mask(T, x.device), memory_mask)
    caches = dec.init_cache(memory)
    assert all(c.self_k.shape == (B, H, 0, D // H) for c in caches)
    assert all(c.cross_k.shape == (B, H, S, D // H) for c in caches)
    for t in range(T):
        y, caches = dec.step(x[:, t : t + 1], caches, memory_mask)
        assert all(c.self_k.shape == c.self_v.shape == (B, H, t + 1, D // H) for c in caches)
        torch.testing.assert_close(y[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_layer_cache_select_reorders_rows_and_examples() -> None:
    t = [torch.arange(4.0).view(4, 1, 1, 1).expand(4, H, n, 3).clone() for n in (2, 2, 5, 5)]
    cache = LayerCache(*t)
    beams = cache.select(torch.tensor([3, 3, 0]))  # rows reorder; the per-example memory K/V stay as they are
    assert [f[:, 0, 0, 0].tolist() for f in (beams.self_k, beams.self_v)] == [[3.0, 3.0, 0.0]] * 2
    assert beams.cross_k is cache.cross_k
    assert beams.cross_v is cache.cross_v
    dropped = cache.select(torch.tensor([3, 0]), examples=torch.tensor([2]))
    assert [f[:, 0, 0, 0].tolist() for f in (dropped.self_k, dropped.self_v)] == [[3.0, 0.0]] * 2
    assert [f[:, 0, 0, 0].tolist() for f in (dropped.cross_k, dropped.cross_v)] == [[2.0]] * 2


def test_init_weights() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(500, 64), torch.nn.Linear(64, 64))
    torch.nn.init.ones_(model[1].bias)
    init_weights(model, d_model=64)
    assert torch.all(model[1].bias == 0)
    assert model[0].weight.std().item() == pytest.approx(64**-0.5, rel=0.05)
    bound = math.sqrt(6 / (64 + 64))
    assert model[1].weight.abs().max().item() <= bound

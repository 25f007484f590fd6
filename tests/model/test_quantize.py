"""Dynamic int8 Linear layers: close to float32, every Linear replaced, traced == eager, loaded from a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from model import DecodeOptions, Translator, decode, load_checkpoint, pad_ids
from model.jit import trace_translator
from model.quantize import Int8Linear, quantize
from tests.conftest import tiny_translation_config

V = 60


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (7, 64), (3, 5, 64)])
def test_int8_linear_is_close_to_float(bias: bool, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=bias)
    x = torch.randn(*shape)
    q = Int8Linear(linear)
    y = q(x)
    assert y.shape == (*shape[:-1], 96)
    assert y.dtype == torch.float32
    assert relative_error(y, linear(x)) < 0.02  # 8-bit weights per channel, 7-bit activations


def test_quantize_replaces_every_linear_and_keeps_embeddings_float() -> None:
    torch.manual_seed(0)
    model = Translator(tiny_translation_config(V, tie_embeddings=True)).eval()
    n_linear = sum(isinstance(m, nn.Linear) for m in model.modules())
    quantize(model, "int8")
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert sum(isinstance(m, Int8Linear) for m in model.modules()) == n_linear
    assert model.src_embed.token.weight.dtype == torch.float32  # the tied embedding is not quantized
    assert "generator.weight" not in model.state_dict()


def test_quantize_refuses_bad_requests() -> None:
    model = Translator(tiny_translation_config(V)).eval()
    with pytest.raises(ValueError, match="quantize must be one of"):
        quantize(model, "int4")
    with pytest.raises(ValueError, match="float32 CPU model"):
        quantize(model.to(torch.bfloat16), "int8")


def quantized_translator(seed: int) -> Translator:
    torch.manual_seed(seed)
    return quantize(Translator(tiny_translation_config(V, tie_embeddings=False)).eval(), "int8")  # type: ignore[return-value]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_traced_int8_decodes_as_eager_int8(beam_size: int) -> None:
    g = torch.Generator().manual_seed(1)
    srcs = [torch.randint(4, V, (n,), generator=g).tolist() for n in (6, 2, 9, 4)]
    opts = DecodeOptions(beam_size=beam_size, num_hypotheses=beam_size, max_length=12)
    eager, traced = quantized_translator(3), quantized_translator(3)
    expected = decode(eager, pad_ids(srcs, 0), opts)
    got = decode(trace_translator(traced), pad_ids(srcs, 0), opts)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in expected]
    for hs, es in zip(got, expected, strict=True):
        assert [h.score for h in hs] == pytest.approx([h.score for h in es], abs=1e-4)


def test_load_checkpoint_quantized_is_close_to_float(tiny_translator_checkpoint: Path) -> None:
    full = load_checkpoint(tiny_translator_checkpoint)
    q = load_checkpoint(tiny_translator_checkpoint, quantize="int8")
    assert isinstance(q.model, Translator)
    assert isinstance(q.model.generator, Int8Linear)
    src = torch.tensor([[5, 9, 14, 3], [7, 8, 3, 0]])
    tgt = torch.tensor([[2, 11, 12], [2, 13, 0]])
    with torch.inference_mode():
        assert relative_error(q.model(src, tgt), full.model(src, tgt)) < 0.05

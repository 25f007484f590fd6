"""Dynamic int8 quantization of a model's Linear layers, for CPU inference (fbgemm's int8 GEMMs).

Weights are quantized once, per output channel (symmetric, int8); activations are quantized per call, per
tensor (7-bit, `reduce_range`: AVX2 without VNNI sums u8*s8 pairs in int16, which 8 bits could overflow).
Embeddings, LayerNorms and attention stay float32. At batch 1 a decoder step is bound by reading its weights
from memory, so 4x smaller weights are most of the gain; at batch 32 the int8 GEMMs are also faster.

PyTorch 2.13 deprecates its quantized tensors (pytorch/pytorch#184982), which fbgemm's packed weights are built
from; its successor on CPU, torch._int_mm, is much slower on AVX2 (BENCHMARKS.md), so this stays on fbgemm and
silences the notice at load.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from model.jit import WARNINGS_LOCK

MODES = ("int8",)


class Int8Linear(nn.Module):
    """y = x W^T + b with W stored as int8 per output channel, x quantized per call (fbgemm)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()  # (out, in)
        scales = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        zeros = torch.zeros(w.size(0), dtype=torch.long)
        bias = None if linear.bias is None else linear.bias.detach().float()
        with WARNINGS_LOCK, warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel"
            )
            qweight = torch.quantize_per_channel(w, scales, zeros, axis=0, dtype=torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(qweight, bias)  # fbgemm's packed layout
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) float32 -> (..., out) float32."""
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize(model: nn.Module, mode: str) -> nn.Module:
    """Replace every nn.Linear of `model` (float32, on CPU, eval mode) in place; returns `model`.

    A Linear that shares its weight with an embedding (tied output projection) gets its own int8 copy: the
    embedding lookup stays float32.
    """
    if mode not in MODES:
        raise ValueError(f"quantize must be one of {MODES}, got {mode!r}")
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        raise ValueError("int8 quantization needs PyTorch's fbgemm engine (x86 CPUs)")
    param = next(model.parameters())
    if param.device.type != "cpu" or param.dtype != torch.float32:
        raise ValueError(
            f"int8 quantization runs on a float32 CPU model, got {param.dtype} on {param.device}"
        )
    torch.backends.quantized.engine = "fbgemm"
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child))
    return model

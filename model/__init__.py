"""Pure-PyTorch Transformer library shared by `training` and `app` (imports neither).

The names below load their module on first use (PEP 562): importing one torch-free module (model.config,
model.files, model.tokenizer, model.preprocess, model.unknowns) does not import torch, which the server's
HTTP processes never do (app/parallel/http.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from model.checkpoint import LoadedModel, build_model, load_checkpoint, save_checkpoint
    from model.classifier import SentimentClassifier
    from model.config import ModelConfig
    from model.decoding import Decodable, beam_search, decode, greedy_decode
    from model.files import CheckpointError
    from model.options import DecodeOptions, DecodingStopped, Hypothesis
    from model.preprocess import pad_ids
    from model.tokenizer import Tokenizer
    from model.translator import AttentionMaps, Translator

_MODULES = {
    "model.checkpoint": ("LoadedModel", "build_model", "load_checkpoint", "save_checkpoint"),
    "model.files": ("CheckpointError",),
    "model.classifier": ("SentimentClassifier",),
    "model.config": ("ModelConfig",),
    "model.decoding": ("Decodable", "beam_search", "decode", "greedy_decode"),
    "model.options": ("DecodeOptions", "DecodingStopped", "Hypothesis"),
    "model.preprocess": ("pad_ids",),
    "model.tokenizer": ("Tokenizer",),
    "model.translator": ("AttentionMaps", "Translator"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AttentionMaps",
    "CheckpointError",
    "Decodable",
    "DecodeOptions",
    "DecodingStopped",
    "Hypothesis",
    "LoadedModel",
    "ModelConfig",
    "SentimentClassifier",
    "Tokenizer",
    "Translator",
    "beam_search",
    "build_model",
    "decode",
    "greedy_decode",
    "load_checkpoint",
    "pad_ids",
    "save_checkpoint",
]


def __getattr__(name: str) -> Any:
    if (module := _WHERE.get(name)) is None:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value

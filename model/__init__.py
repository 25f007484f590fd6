"""Pure-PyTorch Transformer library shared by `training` and `app` (imports neither)."""

from model.checkpoint import CheckpointError, LoadedModel, build_model, load_checkpoint, save_checkpoint
from model.classifier import SentimentClassifier
from model.config import ModelConfig
from model.decoding import (
    Decodable,
    DecodeOptions,
    DecodingStopped,
    Hypothesis,
    beam_search,
    decode,
    greedy_decode,
)
from model.preprocess import pad_ids
from model.tokenizer import Tokenizer
from model.translator import AttentionMaps, Translator

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

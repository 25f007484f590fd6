"""XLM-RoBERTa sequence classifier (transformers' XLMRobertaForSequenceClassification), served as ours.

A different encoder from our classifier's: post-norm layers (our Encoder with norm_first=False), GELU, learned
positions counted from padding_idx + 1 over the real tokens (fairseq's make_positions), a LayerNorm on the
embeddings, and the head dense -> tanh -> out_proj on <s>. The one token type's embedding is a constant:
folded into the position table at import. Same interface as SentimentClassifier (handlers, TorchScript,
/attention, quantization use it unchanged). Imported by `python -m training import xlm-roberta`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.classifier import SentimentClassifier
from model.config import ModelConfig
from model.layers import Encoder, init_weights


class XLMREmbeddings(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pad_id = cfg.pad_id
        self.token = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.max_len + cfg.pad_id + 1, cfg.d_model)  # (P, D), token type 0 added
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, ids: Tensor) -> Tensor:
        """(B, S) -> (B, S, D); real token k (1-based) sits at position pad_id + k, padding at pad_id."""
        real = (ids != self.pad_id).long()
        positions = real.cumsum(1) * real + self.pad_id
        return self.norm(self.token(ids) + self.position(positions))


class ClassificationHead(nn.Module):
    """<s>'s hidden state (B, D) -> dense -> tanh -> out_proj -> logits (B, C)."""

    def __init__(self, d_model: int, classes: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.out_proj(torch.tanh(self.dense(x)))


class XLMRClassifier(SentimentClassifier):
    def __init__(self, cfg: ModelConfig, init: bool = True) -> None:
        nn.Module.__init__(self)  # SentimentClassifier's parts, built the XLM-R way
        assert cfg.task == "sentiment", cfg.task
        assert cfg.architecture == "xlm-roberta", cfg.architecture
        assert cfg.pooling == "cls", "XLM-R classifies from <s>"
        self.cfg = cfg
        self.embed = XLMREmbeddings(cfg)  # type: ignore[assignment]
        self.encoder = Encoder(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = ClassificationHead(cfg.d_model, len(cfg.labels))  # type: ignore[assignment]
        if init:
            init_weights(self, cfg.d_model)
        self.ngram = None

    def encoder_only(self) -> XLMRClassifier:
        return self.eval()  # it has no n-gram head

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        raise NotImplementedError("an imported XLM-R classifier has no masked-LM head")

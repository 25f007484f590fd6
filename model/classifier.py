"""Sentiment classifier: Transformer encoder + masked-mean (or [CLS]) pooling + linear head.

With cfg.ngram set, it also holds a hashed n-gram head (model.ngram, "wide & deep"): its logits, computed
from the text's hashed n-grams (a second input beside the token ids), add to the encoder's.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from model.config import ModelConfig
from model.layers import Embeddings, Encoder, init_weights, make_padding_mask
from model.ngram import NgramHead, NgramSpec


class SentimentClassifier(nn.Module):
    def __init__(self, cfg: ModelConfig, init: bool = True) -> None:
        """init=False skips the random init (a checkpoint load overwrites every weight)."""
        super().__init__()
        assert cfg.task == "sentiment", cfg.task
        self.cfg = cfg
        self.embed = Embeddings.from_config(cfg)
        self.encoder = Encoder(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.d_model, len(cfg.labels))
        if init:
            init_weights(self, cfg.d_model)
        self.ngram = (
            NgramHead(cfg.ngram_buckets, len(cfg.labels), NgramSpec.parse(cfg.ngram)) if cfg.ngram else None
        )

    def encode(self, ids: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor, list[Tensor]]:
        """ids (B, S) -> hidden (B, S, D), mask (B, 1, 1, S), per-layer attention (B, H, S, S) if asked."""
        mask = make_padding_mask(ids, self.cfg.pad_id)
        hidden, weights = self.encoder(self.embed(ids), mask, need_weights)
        return hidden, mask, weights

    def pool(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """(B, S, D) -> (B, D): mean over real tokens, or the first ([CLS]) position."""
        if self.cfg.pooling == "cls":
            return hidden[:, 0]
        keep = mask[:, 0, 0, :, None].to(hidden.dtype)  # (B, S, 1)
        return (hidden * keep).sum(1) / keep.sum(1).clamp_min(1.0)

    def logits(self, ids: Tensor, ngrams: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """ids (B, S) -> logits (B, C) float32: the encoder's, plus with an n-gram head the head's on `ngrams`,
        the same B texts' hashed n-grams as EmbeddingBag input (ids, offsets): see the function model.ngram.bags."""
        hidden, mask, _ = self.encode(ids)
        logits = self.head(self.dropout(self.pool(hidden, mask))).float()
        if self.ngram is None:
            return logits
        if ngrams is None:
            raise ValueError(f"a classifier with a {self.cfg.ngram} n-gram head needs the texts' n-grams")
        return logits + self.ngram(*ngrams)

    forward = logits  # model(ids, ngrams): training (DDP) and torch.jit.trace call forward

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """Masked-LM pretraining head tied to the token embedding: (..., D) -> (..., V)."""
        return hidden @ self.embed.token.weight.t()

    def encoder_only(self) -> SentimentClassifier:
        """The same classifier without its n-gram head (sharing the encoder's tensors), in eval mode."""
        # its logits differ from the whole model's, so the temperature fitted on those does not carry over
        bare = SentimentClassifier(replace(self.cfg, ngram="", ngram_buckets=0, temperature=1.0), init=False)
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("ngram.")}
        bare.load_state_dict(state, assign=True)  # the same tensors, in their dtype (not copied into fp32)
        weight = self.embed.token.weight  # non-persistent buffers (positions) follow the weights
        return bare.to(weight.device, weight.dtype).eval()

    @torch.inference_mode()
    def predict(self, ids: Tensor, ngrams: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """ids (B, S) (and the texts' n-grams with an n-gram head) -> class probabilities (B, C) float32,
        calibrated: the logits divided by cfg.temperature."""
        return calibrated(self.logits(ids, ngrams), self.cfg.temperature)


def calibrated(logits: Tensor, temperature: float) -> Tensor:
    """Logits (N, C) -> class probabilities (N, C): softmax(logits / temperature), temperature scaling
    (Guo et al. 2017). The order of the classes, hence the label, is the same at every temperature."""
    return (logits / temperature).softmax(-1)  # / 1.0 is exact: an uncalibrated model answers as before

"""Encoder-decoder translator: encode once, then decode step by step with a KV cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from model.config import ModelConfig
from model.layers import (
    Decoder,
    Embeddings,
    Encoder,
    LayerCache,
    init_weights,
    make_causal_mask,
    make_padding_mask,
)


@dataclass
class DecoderState:
    """Everything a decoding step needs: R hypothesis rows (B, or B*K beams) over N examples."""

    caches: list[LayerCache]
    memory_mask: Tensor  # (N, 1, 1, S)
    step: int = 0  # position of the next input token

    def select(self, rows: Tensor, examples: Tensor | None = None) -> DecoderState:
        """Keep/reorder rows (R',); `examples` (N',) when the set of examples changes (see LayerCache)."""
        mask = self.memory_mask if examples is None else self.memory_mask.index_select(0, examples)
        return DecoderState([c.select(rows, examples) for c in self.caches], mask, self.step)


@dataclass
class AttentionMaps:
    """Per-layer attention probabilities of one forward pass (float32, on CPU)."""

    encoder: list[Tensor]  # each (B, H, S, S)
    decoder: list[Tensor]  # each (B, H, T, T)
    cross: list[Tensor]  # each (B, H, T, S)


class Translator(nn.Module):
    def __init__(self, cfg: ModelConfig, init: bool = True) -> None:
        """init=False skips the random init (a checkpoint load overwrites every weight)."""
        super().__init__()
        assert cfg.task == "translation", cfg.task
        self.cfg = cfg
        self.src_embed = Embeddings(cfg.vocab_size, cfg.d_model, cfg.max_len, cfg.dropout)
        self.tgt_embed = Embeddings(cfg.vocab_size, cfg.d_model, cfg.max_len, cfg.dropout)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if init:
            init_weights(self, cfg.d_model)
        if cfg.tie_embeddings:  # one shared vocabulary: three-way weight tying (paper, section 3.4)
            self.tgt_embed.token.weight = self.src_embed.token.weight
            self.generator.weight = self.src_embed.token.weight
        # tokens a decoder never emits: padding, BOS and target-language tags
        banned = torch.tensor(sorted({cfg.pad_id, cfg.bos_id, *cfg.target_lang_ids.values()}))
        self.register_buffer("banned", banned, persistent=False)

    def encode(self, src: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor, list[Tensor]]:
        """src (B, S) -> memory (B, S, D), memory mask (B, 1, 1, S), encoder attention if asked."""
        mask = make_padding_mask(src, self.cfg.pad_id)
        memory, weights = self.encoder(self.src_embed(src), mask, need_weights)
        return memory, mask, weights

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), decoder input tgt_in (B, T) -> logits (B, T, V)."""
        memory, memory_mask, _ = self.encode(src)
        causal = make_causal_mask(tgt_in.size(1), tgt_in.device)
        hidden, _, _ = self.decoder(self.tgt_embed(tgt_in), memory, causal, memory_mask)
        return self.generator(hidden)

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> DecoderState:
        return DecoderState(self.decoder.init_cache(memory), memory_mask)

    def decode_step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Last tokens (B,) -> log-probabilities (B, V) in float32 and the advanced state."""
        x = self.tgt_embed(tokens[:, None], start=state.step)  # (B, 1, D)
        hidden, caches = self.decoder.step(x, state.caches, state.memory_mask)
        logits = self.generator(hidden[:, 0]).float()
        logits[:, self.banned] = float("-inf")
        return logits.log_softmax(-1), DecoderState(caches, state.memory_mask, state.step + 1)

    @torch.inference_mode()
    def attention(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, AttentionMaps]:
        """Force-decode tgt_in (B, T) for src (B, S): log-probs (B, T, V) and every attention map."""
        memory, memory_mask, enc_w = self.encode(src, need_weights=True)
        causal = make_causal_mask(tgt_in.size(1), tgt_in.device)
        hidden, dec_w, cross_w = self.decoder(
            self.tgt_embed(tgt_in), memory, causal, memory_mask, need_weights=True
        )
        log_probs = self.generator(hidden).float().log_softmax(-1)

        def cpu(ws: list[Tensor]) -> list[Tensor]:
            return [w.float().cpu() for w in ws]

        return log_probs, AttentionMaps(cpu(enc_w), cpu(dec_w), cpu(cross_w))

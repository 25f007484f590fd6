"""Encoder-decoder translator: encode once, then decode step by step with a KV cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


# Translator.step, eager or traced: step_inputs(...) -> log-probs (R, V), per layer self-attention K and V
StepFn = Callable[..., tuple[Tensor, tuple[Tensor, ...], tuple[Tensor, ...]]]


def step_inputs(tokens: Tensor, state: DecoderState) -> tuple[Any, ...]:
    """Translator.step's arguments for the last tokens (R,) and `state`."""
    caches = state.caches
    return (
        tokens,
        torch.tensor([state.step], device=tokens.device),
        state.memory_mask,
        [c.self_k for c in caches],
        [c.self_v for c in caches],
        [c.cross_k for c in caches],
        [c.cross_v for c in caches],
    )


def advance(step: StepFn, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
    """Run `step` (Translator.step or its traced graph) on the last tokens (R,): log-probabilities (R, V)
    and the state one position further."""
    log_probs, self_k, self_v = step(*step_inputs(tokens, state))
    caches = [
        LayerCache(k, v, c.cross_k, c.cross_v) for k, v, c in zip(self_k, self_v, state.caches, strict=True)
    ]
    return log_probs, DecoderState(caches, state.memory_mask, state.step + 1)


class Translator(nn.Module):
    def __init__(self, cfg: ModelConfig, init: bool = True) -> None:
        """init=False skips the random init (a checkpoint load overwrites every weight)."""
        super().__init__()
        assert cfg.task == "translation", cfg.task
        self.cfg = cfg
        self.src_embed = Embeddings.from_config(cfg)
        self.tgt_embed = Embeddings.from_config(cfg)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.logits_bias)
        if init:
            init_weights(self, cfg.d_model)
        if cfg.tie_embeddings:  # one shared vocabulary: three-way weight tying (paper, section 3.4)
            self.tgt_embed.token.weight = self.src_embed.token.weight
            self.generator.weight = self.src_embed.token.weight
        # tokens a decoder never emits: padding, BOS, its start token and its target-language tags (a tag
        # on the source side is an ordinary vocabulary entry to the decoder, as in Marian)
        banned_ids = {cfg.pad_id, cfg.bos_id}
        if cfg.decoder_start_id is not None:
            banned_ids.add(cfg.decoder_start_id)
        if cfg.target_lang_position == "decoder":
            banned_ids.update(cfg.target_lang_ids.values())
        banned = torch.tensor(sorted(banned_ids))
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
        """Cross-attention K/V from memory (N, S, D), once; empty self-attention caches."""
        return DecoderState(self.decoder.init_cache(memory), memory_mask)

    def decode_step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Last tokens (R,) -> log-probabilities (R, V) in float32 and the advanced state."""
        return advance(self.step, tokens, state)

    def step(
        self,
        tokens: Tensor,
        position: Tensor,
        memory_mask: Tensor,
        self_k: list[Tensor],
        self_v: list[Tensor],
        cross_k: list[Tensor],
        cross_v: list[Tensor],
    ) -> tuple[Tensor, tuple[Tensor, ...], tuple[Tensor, ...]]:
        """decode_step on plain tensors, the form model.jit traces: tokens (R,), position (1,) ->
        log-probabilities (R, V) float32 and each layer's self-attention K and V grown by one position."""
        x = self.tgt_embed.at(tokens[:, None], position)  # (R, 1, D)
        caches = [LayerCache(*c) for c in zip(self_k, self_v, cross_k, cross_v, strict=True)]
        hidden, caches = self.decoder.step(x, caches, memory_mask)
        logits = self.generator(hidden[:, 0]).float()
        logits = logits.index_fill(1, self.banned, float("-inf"))
        return logits.log_softmax(-1), tuple(c.self_k for c in caches), tuple(c.self_v for c in caches)

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

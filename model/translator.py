"""Encoder-decoder translator: encode once, then decode step by step with a KV cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from model.config import ModelConfig
from model.jit import tracing
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


@dataclass
class TracedGraphs:
    """A Translator's encode (src -> memory, mask), cross-attention K/V (memory -> per-layer K, V) and step
    (Translator.step's signature), as TorchScript."""

    encode: torch.jit.ScriptModule
    cross: torch.jit.ScriptModule
    step: torch.jit.ScriptModule


def _step_inputs(tokens: Tensor, state: DecoderState) -> tuple[Any, ...]:
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


class _Encode(nn.Module):
    def __init__(self, model: Translator) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        memory, mask, _ = self.model.encode(src)
        return memory, mask


class _Cross(nn.Module):
    def __init__(self, model: Translator) -> None:
        super().__init__()
        self.model = model

    def forward(self, memory: Tensor) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        caches = self.model.decoder.init_cache(memory)
        return tuple(c.cross_k for c in caches), tuple(c.cross_v for c in caches)


class _Step(nn.Module):
    def __init__(self, model: Translator) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Any) -> tuple[Tensor, tuple[Tensor, ...], tuple[Tensor, ...]]:
        return self.model.step(*inputs)


class Translator(nn.Module):
    def __init__(self, cfg: ModelConfig, init: bool = True) -> None:
        """init=False skips the random init (a checkpoint load overwrites every weight)."""
        super().__init__()
        assert cfg.task == "translation", cfg.task
        self.cfg = cfg
        embed = (cfg.vocab_size, cfg.d_model, cfg.max_len, cfg.dropout, cfg.scale_embeddings, cfg.positions)
        self.src_embed = Embeddings(*embed)
        self.tgt_embed = Embeddings(*embed)
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
        self.graphs: TracedGraphs | None = None  # set by trace(); a plain attribute, not a submodule

    def encode(self, src: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor, list[Tensor]]:
        """src (B, S) -> memory (B, S, D), memory mask (B, 1, 1, S), encoder attention if asked."""
        if self.graphs is not None and not (need_weights or self.training):
            memory, mask = self.graphs.encode(src)
            return memory, mask, []
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
        if self.graphs is None or self.training:
            return DecoderState(self.decoder.init_cache(memory), memory_mask)
        cross_k, cross_v = self.graphs.cross(memory)
        empty = memory.new_zeros(memory.size(0), self.cfg.n_heads, 0, self.cfg.head_dim)
        caches = [LayerCache(empty, empty, k, v) for k, v in zip(cross_k, cross_v, strict=True)]
        return DecoderState(caches, memory_mask)

    def decode_step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Last tokens (R,) -> log-probabilities (R, V) in float32 and the advanced state."""
        step = self.graphs.step if self.graphs is not None and not self.training else self.step
        log_probs, self_k, self_v = step(*_step_inputs(tokens, state))
        caches = [
            LayerCache(k, v, c.cross_k, c.cross_v)
            for k, v, c in zip(self_k, self_v, state.caches, strict=True)
        ]
        return log_probs, DecoderState(caches, state.memory_mask, state.step + 1)

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
        """decode_step on plain tensors, the form `trace` records: tokens (R,), position (1,) ->
        log-probabilities (R, V) float32 and each layer's self-attention K and V grown by one position."""
        x = self.tgt_embed.at(tokens[:, None], position)  # (R, 1, D)
        caches = [LayerCache(*c) for c in zip(self_k, self_v, cross_k, cross_v, strict=True)]
        hidden, caches = self.decoder.step(x, caches, memory_mask)
        logits = self.generator(hidden[:, 0]).float()
        logits = logits.index_fill(1, self.banned, float("-inf"))
        return logits.log_softmax(-1), tuple(c.self_k for c in caches), tuple(c.self_v for c in caches)

    def trace(self) -> None:
        """Record encode and the decoder step as TorchScript graphs, used from then on in eval mode.

        A graph runs its ~150 ops in C++, without per-op Python dispatch, and releases the GIL once per call.
        Traced from the eager code on shapes that differ in every dimension (N=2 examples of G=3 hypotheses,
        5 source and 2 cached positions), so the graphs take any batch, beam and length; tests pin them to
        the eager path. Trace after the last change of device, dtype or weights (e.g. quantization).
        """
        dev, pad = self.banned.device, self.cfg.pad_id
        src = torch.full((2, 5), self.cfg.eos_id, dtype=torch.long, device=dev)
        src[1, 3:] = pad  # one padded row, so the mask is a real input
        # the one Python-side check the encoder makes: Embeddings' max_len (sources are cut to max_len before)
        with tracing("Converting a tensor to a Python boolean"):
            self.graphs = None
            encode = torch.jit.trace(_Encode(self), (src,), check_trace=False)
            memory, mask = encode(src)
            cross = torch.jit.trace(_Cross(self), (memory,), check_trace=False)
            state = self.init_state(memory, mask).select(torch.tensor([0, 0, 0, 1, 1, 1], device=dev))
            tokens = torch.full((6,), self.cfg.eos_id, dtype=torch.long, device=dev)
            for _ in range(2):
                _, state = self.decode_step(tokens, state)
            step = torch.jit.trace(_Step(self), _step_inputs(tokens, state), check_trace=False)
        self.graphs = TracedGraphs(encode, cross, step)

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

"""Building blocks of the Transformer (Vaswani et al., 2017): embeddings, attention, encoder and decoder stacks.

Dims: B batch, S source length, T target length, D d_model, H heads, Dh head dim, V vocabulary.
Masks are bool, True = may attend, shaped to broadcast over heads: padding (B, 1, 1, S), causal (1, 1, T, T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.script import script


def make_padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, S) token ids -> (B, 1, 1, S) bool, True on real tokens."""
    return (ids != pad_id)[:, None, None, :]


def make_causal_mask(t: int, device: torch.device) -> Tensor:
    """(1, 1, T, T) bool lower triangle: position i sees positions <= i."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()[None, None]


def sinusoids(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """(L, D) fixed position encoding, frequencies 10000 ** (-2i / D): sin on even and cos on odd dims
    ("interleaved", ours), or sines in the first half and cosines in the second ("sin_cos": Marian and
    CTranslate2; computed in float64 as Marian does, so imported weights meet the same table)."""
    if layout == "sin_cos":
        position = torch.arange(max_len, dtype=torch.float64)[:, None]
        freq = 10000.0 ** (-2 * torch.arange(0, (d_model + 1) // 2, dtype=torch.float64) / d_model)
        angles = position * freq  # (L, ceil(D / 2))
        return torch.cat([angles.sin(), angles.cos()[:, : d_model // 2]], dim=1).float()
    position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d_model) (unless scale=False) plus the fixed sinusoidal position
    encoding (`sinusoids` layout). The models build theirs with `from_config`."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        dropout: float,
        scale: bool = True,
        layout: str = "interleaved",
    ) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0
        pe = sinusoids(max_len, d_model, layout)
        self.register_buffer("pe", pe, persistent=False)  # (L, D), rebuilt at load, never saved
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> Embeddings:
        """A model's embeddings (the classifier's, the translator's source and target): every setting from
        `cfg`, scale_embeddings and positions included."""
        return cls(cfg.vocab_size, cfg.d_model, cfg.max_len, cfg.dropout, cfg.scale_embeddings, cfg.positions)

    def forward(self, ids: Tensor, start: int = 0) -> Tensor:
        """(B, T) ids at positions start..start+T-1 -> (B, T, D)."""
        t = ids.size(1)
        if start + t > self.pe.size(0):
            raise ValueError(f"sequence of {start + t} tokens exceeds max_len={self.pe.size(0)}")
        x = self.token(ids) * self.scale + self.pe[start : start + t].to(self.token.weight.dtype)
        return self.dropout(x) if self.training else x  # eval: no no-op dropout in traced graphs

    def at(self, ids: Tensor, positions: Tensor) -> Tensor:
        """(B, T) ids at the given positions (T,) -> (B, T, D): positions as a tensor, so a traced decoder
        step reads its position from its input instead of baking it in."""
        x = self.token(ids) * self.scale + self.pe.index_select(0, positions).to(self.token.weight.dtype)
        return self.dropout(x) if self.training else x


FEW_QUERIES = (
    16  # up to this many queries (a decoder step: 1 per hypothesis of an example), explicit attention
)
# torch's CPU softmax over rows shorter than one vector register (16 floats under AVX-512, 8 under AVX2) takes
# a scalar path several times slower than a row of 16 (BENCHMARKS.md, "Short softmax rows")
SHORT_ROW = 16


def softmax_rows(scores: Tensor) -> Tensor:
    """softmax(scores, -1); on a CPU, rows shorter than SHORT_ROW padded with -inf to it and cut back (the
    padding's exp is 0: the same values, within float32 rounding). In a trace the check runs as a scripted
    function, per call."""
    if torch.jit.is_tracing():
        return _SCRIPTED_SOFTMAX(scores, SHORT_ROW)
    return _padded_softmax(scores, SHORT_ROW)


def _padded_softmax(scores: Tensor, row: int) -> Tensor:
    s = scores.size(-1)
    if s >= row or not scores.is_cpu:
        return scores.softmax(-1)
    return F.pad(scores, [0, row - s], value=float("-inf")).softmax(-1).narrow(-1, 0, s)


_SCRIPTED_SOFTMAX = script(_padded_softmax)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over H heads: SDPA, an explicit path for a decoder step's few queries, or an
    explicit path that also returns the weights (/attention)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S, D) -> keys and values, each (B, H, S, Dh); cached by the decoder."""
        return self._heads(self.k_proj(x)), self._heads(self.v_proj(x))

    def attend(
        self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x (B, T, D) over k, v (B, H, S, Dh) -> (B, T, D), weights (B, H, T, S) or None."""
        q = self._heads(self.q_proj(x))
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, S)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = (
                softmax_rows(scores.float()).nan_to_num(0.0).to(q.dtype)
            )  # an all-masked row -> 0, as SDPA
            out = F.dropout(weights, p) @ v
        elif q.size(2) <= FEW_QUERIES and not self.training:
            # a decoding step's 1..K queries: three small ops cost less than SDPA's kernel set-up
            scores = (q @ k.transpose(-2, -1)) * self.head_dim**-0.5  # (B, H, T, S)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            out = softmax_rows(scores) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1)), weights

    def forward(
        self, x: Tensor, context: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        return self.attend(x, *self.project_kv(context), mask, need_weights)


ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


class FeedForward(nn.Module):
    """Position-wise FFN: Linear(D, d_ff) -> activation (ReLU, GELU or swish) -> dropout -> Linear(d_ff, D)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), ACTIVATIONS[activation](), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        linear1, relu, dropout, linear2 = self.net
        h = relu(linear1(x))
        return linear2(dropout(h) if self.training else h)


class Residual(nn.Module):
    """x + dropout(sublayer(norm(x))) in pre-norm, norm(x + dropout(sublayer(x))) in the paper's post-norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        """d_model, dropout and the norm's place (norm_first) from the model's config."""
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.norm_first else x

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        x = x + (self.dropout(y) if self.training else y)
        return x if self.norm_first else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.res1 = Residual(cfg)
        self.res2 = Residual(cfg)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        h = self.res1.pre(x)
        y, w = self.self_attn(h, h, mask, need_weights)
        x = self.res1.post(x, y)
        x = self.res2.post(x, self.ff(self.res2.pre(x)))
        return x, w


@dataclass
class LayerCache:
    """Decoder KV cache of one layer. Self-attention grows by one position a step, one row per hypothesis;
    cross-attention K/V are computed once, one row per example, and shared by the example's G = R / N rows
    (its beams): beam reordering never copies them."""

    self_k: Tensor  # (R, H, t, Dh)
    self_v: Tensor
    cross_k: Tensor  # (N, H, S, Dh)
    cross_v: Tensor

    def select(self, rows: Tensor, examples: Tensor | None = None) -> LayerCache:
        """Keep/reorder hypothesis rows (beam origins, finished rows dropped); `examples` keeps/reorders the
        per-example cross-attention K/V when the set of examples changes (None: unchanged)."""
        cross_k, cross_v = self.cross_k, self.cross_v
        if examples is not None:
            cross_k, cross_v = cross_k.index_select(0, examples), cross_v.index_select(0, examples)
        return LayerCache(
            self.self_k.index_select(0, rows), self.self_v.index_select(0, rows), cross_k, cross_v
        )


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.res1 = Residual(cfg)
        self.res2 = Residual(cfg)
        self.res3 = Residual(cfg)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_mask: Tensor,
        memory_mask: Tensor,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Teacher forcing over the whole target: x (B, T, D), memory (B, S, D)."""
        h = self.res1.pre(x)
        y, w_self = self.self_attn(h, h, self_mask, need_weights)
        x = self.res1.post(x, y)
        y, w_cross = self.cross_attn(self.res2.pre(x), memory, memory_mask, need_weights)
        x = self.res2.post(x, y)
        x = self.res3.post(x, self.ff(self.res3.pre(x)))
        return x, w_self, w_cross

    def step(self, x: Tensor, cache: LayerCache, memory_mask: Tensor) -> tuple[Tensor, LayerCache]:
        """One new position x (R, 1, D) of R = N * G hypotheses (G per example, contiguous) attending to
        the cached prefix and to its example's memory; memory_mask (N, 1, 1, S)."""
        r, _, d = x.shape
        n = cache.cross_k.size(0)  # examples; r // n hypotheses each
        h = self.res1.pre(x)
        k, v = self.self_attn.project_kv(h)
        k = torch.cat([cache.self_k, k], dim=2)
        v = torch.cat([cache.self_v, v], dim=2)
        y, _ = self.self_attn.attend(h, k, v, None)  # the prefix is all visible: no mask
        x = self.res1.post(x, y)
        # an example's G queries attend to its one copy of the memory: (N, G, D) queries, as G positions
        h = self.res2.pre(x).view(n, -1, d)
        y, _ = self.cross_attn.attend(h, cache.cross_k, cache.cross_v, memory_mask)
        x = self.res2.post(x, y.view(r, 1, d))
        x = self.res3.post(x, self.ff(self.res3.pre(x)))
        return x, LayerCache(k, v, cache.cross_k, cache.cross_v)


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """x (B, S, D), mask (B, 1, 1, S) -> (B, S, D) and per-layer weights (B, H, S, S) if asked."""
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, need_weights)
            if w is not None:
                weights.append(w)
        return self.norm(x), weights


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()

    def forward(
        self, x: Tensor, memory: Tensor, self_mask: Tensor, memory_mask: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        w_self, w_cross = [], []
        for layer in self.layers:
            x, ws, wc = layer(x, memory, self_mask, memory_mask, need_weights)
            if ws is not None and wc is not None:
                w_self.append(ws)
                w_cross.append(wc)
        return self.norm(x), w_self, w_cross

    def init_cache(self, memory: Tensor) -> list[LayerCache]:
        """Cross-attention K/V from memory (B, S, D), once; empty self-attention caches."""
        caches = []
        for layer in self.layers:
            ck, cv = layer.cross_attn.project_kv(memory)
            empty = ck.new_zeros(ck.size(0), ck.size(1), 0, ck.size(3))
            caches.append(LayerCache(empty, empty, ck, cv))
        return caches

    def step(
        self, x: Tensor, caches: list[LayerCache], memory_mask: Tensor
    ) -> tuple[Tensor, list[LayerCache]]:
        new = []
        for layer, cache in zip(self.layers, caches, strict=True):
            x, cache = layer.step(x, cache, memory_mask)
            new.append(cache)
        return self.norm(x), new


def init_weights(module: nn.Module, d_model: int) -> None:
    """Xavier-uniform linear weights, zero biases, N(0, d_model^-0.5) embeddings (unit variance after scaling)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=d_model**-0.5)

"""/attention: which layers and heads a request selects, the forward pass that returns the weights, and the
JSON body (app/tasks/attention_png.py renders the same maps as a PNG). The text half (AttentionText: select,
tokenize, bound, the JSON) runs where the request arrives; AttentionHandler, one too, runs the forward and
returns only the selected maps, as numpy arrays (between processes: float32 buffers, AttentionTask.wire).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from app.core.errors import invalid
from app.schemas import AttentionResponse
from app.tasks.handlers import checked_source_ids, uncut_length
from model.config import ModelConfig
from model.preprocess import classifier_ids, target_ids
from model.tokenizer import PairTokenizer, Tokenizer

# torch is imported where the maps are computed: an HTTP process imports this module, never it
if TYPE_CHECKING:
    import torch

    from model import LoadedModel

MAX_ATTENTION_WEIGHTS = 2_000_000  # e.g. 4 layers x 8 heads of a 250-token text


@dataclass(frozen=True)
class LayerSelection:
    """The layers of each stack that a request selected (the stacks may differ in depth), and the heads."""

    encoder: list[int]
    decoder: list[int]  # for decoder self- and cross-attention; [] for a classifier
    heads: list[int]


@dataclass(frozen=True)
class AttentionItem:
    """Exact model inputs: source ids, and for translators the decoder input (start token included); the
    maps to return (None: every layer and head)."""

    source: list[int]
    target: list[int] | None = None
    select: LayerSelection | None = None


@dataclass(frozen=True)
class TextMaps:
    """The selected attention maps of one text, float32, each (L, H, Q, K): the selected layers of a stack
    and heads; decoder and cross None for a classifier."""

    encoder: np.ndarray
    decoder: np.ndarray | None = None
    cross: np.ndarray | None = None


def picked(maps: list[torch.Tensor], layers: list[int], heads: list[int]) -> np.ndarray:
    """Per-layer (H, Q, K) maps -> (L', H', Q, K) float32 for the selected layers and heads."""
    import torch

    if not layers:  # e.g. only encoder layers selected: no decoder map
        return np.empty((0, len(heads), 0, 0), np.float32)
    return torch.stack([maps[layer][heads] for layer in layers]).float().cpu().numpy()


def rounded(maps: np.ndarray) -> np.ndarray:
    """Selected maps as JSON gives them: float64, rounded to 5 decimals."""
    return np.round(maps.astype(np.float64), 5)


class AttentionText:
    """The text half of /attention: layer selection, model inputs from text, the size bound and the JSON
    body. No weights: an HTTP process runs it beside the model process's AttentionHandler, which is one too."""

    def __init__(self, name: str, tokenizer: Tokenizer | PairTokenizer, cfg: ModelConfig) -> None:
        self.name, self.tokenizer = name, tokenizer
        self.cfg, self.is_translator = cfg, cfg.task == "translation"
        self.encoder_layers = cfg.n_layers
        self.decoder_layers = cfg.n_decoder_layers if self.is_translator else 0

    def costs(self, items: list[AttentionItem]) -> list[int]:
        """Work units: each item's tokens, source and target."""
        return [len(item.source) + len(item.target or []) for item in items]

    def select(self, layers: list[int] | None, heads: list[int] | None) -> LayerSelection:
        """Validated layer/head subsets (default all); 422 naming the valid ranges otherwise. A layer index
        selects that layer in each stack that has it (a 4-layer encoder with a 3-layer decoder: layer 3 is
        the encoder's only)."""
        enc, dec, n_heads = self.encoder_layers, self.decoder_layers, self.cfg.n_heads
        for field, values in (("layers", layers), ("heads", heads)):  # each map once: bounded output
            if values and len(set(values)) < len(values):
                twice = next(v for v in values if values.count(v) > 1)
                raise invalid((field,), f"lists {twice} more than once: give each {field[:-1]} at most once")
        if bad := [v for v in layers or [] if v >= max(enc, dec)]:
            stacks = f" (encoder 0..{enc - 1}, decoder 0..{dec - 1})" if dec else ""
            raise invalid(
                ("layers",), f"layer {bad[0]} is out of range: valid range is 0..{max(enc, dec) - 1}{stacks}"
            )
        if bad := [v for v in heads or [] if v >= n_heads]:
            raise invalid(("heads",), f"head {bad[0]} is out of range: valid range is 0..{n_heads - 1}")
        return LayerSelection(
            [v for v in layers or range(enc) if v < enc],
            [v for v in layers or range(dec) if v < dec],
            heads or list(range(n_heads)),
        )

    def source(self, text: str) -> AttentionItem:
        """The item of a text (its target, for translators, comes with decoder_input)."""
        if not self.is_translator:
            return AttentionItem(classifier_ids(self.tokenizer, text, self.cfg))
        return AttentionItem(checked_source_ids(self.name, self.tokenizer, self.cfg, text, ("text",)))

    def decoder_input(self, target: str, target_lang: str | None) -> list[int]:
        """Decoder input for a given target: [start] + pieces (the EOS label is not fed); 422 naming the limit
        when it does not fit max_len (as for the source: never cut silently)."""
        cfg = self.cfg
        ids = target_ids(self.tokenizer, target, cfg, target_lang)
        if n := uncut_length(self.tokenizer, target, ids, cfg.max_len, 2):
            raise invalid(
                ("target",),
                f"a target of {n} tokens exceeds the {cfg.max_len}-token limit of {self.name} "
                "(start and EOS included)",
            )
        return ids[:-1]

    def check_size(self, item: AttentionItem, sel: LayerSelection) -> None:
        """422 when the selected maps hold more than MAX_ATTENTION_WEIGHTS numbers (JSON of ~8 bytes each,
        built under the GIL: a bound on memory and on the event loop's stalls)."""
        s, t = len(item.source), len(item.target or [])
        size = len(sel.heads) * (len(sel.encoder) * s * s + len(sel.decoder) * (t * t + t * s))
        if size > MAX_ATTENTION_WEIGHTS:
            raise invalid(
                ("layers",),
                f"the selected maps hold {size:,} attention weights, more than {MAX_ATTENTION_WEIGHTS:,}: "
                f"select fewer layers or heads, or send a shorter text",
                "too_long",
            )

    def response(
        self, item: AttentionItem, maps: TextMaps, sel: LayerSelection, translation: str | None
    ) -> AttentionResponse:
        pieces = self.tokenizer.pieces
        decoder = maps.decoder is not None and maps.cross is not None
        return AttentionResponse.model_construct(  # built here, valid: no second pass over every weight
            model=self.name,
            layers=sel.encoder,
            decoder_layers=sel.decoder if decoder else None,
            heads=sel.heads,
            source_tokens=pieces(item.source),
            target_tokens=pieces(item.target) if item.target is not None else None,
            encoder_self_attention=rounded(maps.encoder).tolist(),
            decoder_self_attention=rounded(maps.decoder).tolist() if maps.decoder is not None else None,
            cross_attention=rounded(maps.cross).tolist() if maps.cross is not None else None,
            translation=translation,
        )

    def encode_json(
        self, item: AttentionItem, maps: TextMaps, sel: LayerSelection, translation: str | None
    ) -> bytes:
        """The JSON body (megabytes for a long text: built in a thread, off the event loop)."""
        return self.response(item, maps, sel, translation).model_dump_json(exclude_none=True).encode()


class AttentionHandler(AttentionText):
    """Force-decoding with the explicit attention path (weights returned); one item per forward."""

    def __init__(self, loaded: LoadedModel) -> None:
        super().__init__(loaded.name, loaded.tokenizer, loaded.config)
        self.model = loaded.model

    def run(self, items: list[AttentionItem]) -> list[TextMaps]:
        """The maps of each item (in an inference worker; its batcher sends one item at a time)."""
        import torch

        with torch.inference_mode():
            return [self._maps(item) for item in items]

    def _maps(self, item: AttentionItem) -> TextMaps:
        import torch

        from model.classifier import SentimentClassifier

        sel = item.select or LayerSelection(
            list(range(self.encoder_layers)), list(range(self.decoder_layers)), list(range(self.cfg.n_heads))
        )
        dev = next(self.model.parameters()).device
        src = torch.tensor([item.source], device=dev)
        if isinstance(self.model, SentimentClassifier):
            _, _, weights = self.model.encode(src, need_weights=True)
            return TextMaps(picked([w[0] for w in weights], sel.encoder, sel.heads))
        assert item.target is not None
        _, maps = self.model.attention(src, torch.tensor([item.target], device=dev))
        return TextMaps(
            picked([w[0] for w in maps.encoder], sel.encoder, sel.heads),
            picked([w[0] for w in maps.decoder], sel.decoder, sel.heads),
            picked([w[0] for w in maps.cross], sel.decoder, sel.heads),
        )

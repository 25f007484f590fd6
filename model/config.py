"""Model configuration: one frozen dataclass saved as JSON next to the weights (nanoGPT's GPTConfig)."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Task = Literal["sentiment", "translation"]
Activation = Literal["relu", "gelu", "swish"]  # swish = SiLU (x * sigmoid(x)), Marian's default


_SPEC = re.compile(r"w(\d)c(\d)")

# Upper bounds on the sizes a config.json may ask for, checked before anything is built: a model is built
# (and its positional table allocated) from these, so an absurd value would cost minutes and gigabytes
# before the weights could disagree. Each is several times what any supported model uses (OPUS-MT big:
# d_model 1024, 6 + 6 layers, d_ff 4096, 512 positions; XLM-R large: 24 layers, 250,002 pieces, 514).
SIZE_LIMITS = {
    "vocab_size": 1_048_576,
    "d_model": 8_192,
    "n_heads": 128,
    "n_layers": 64,
    "n_decoder_layers": 64,
    "d_ff": 65_536,
    "max_len": 16_384,
    "ngram_buckets": 16_777_216,
}
# the smallest value each takes (a sentiment model has no decoder; no n-gram head has 0 buckets)
SIZE_FLOORS = {"n_decoder_layers": 0, "ngram_buckets": 0}


@dataclass(frozen=True)
class NgramSpec:
    """A classifier's n-gram head (model.ngram): its word and character orders, "wWcC"."""

    words: int  # word n-grams of order 1..words
    chars: int  # character n-grams of order 1..chars (0 = none), over the space-joined words

    @staticmethod
    @functools.cache  # parsed once per spec string
    def parse(spec: str) -> NgramSpec:
        """'w3c4' -> NgramSpec(3, 4); ValueError naming the format otherwise."""
        m = _SPEC.fullmatch(spec)
        if not m or int(m[1]) < 1:
            raise ValueError(f"n-gram spec {spec!r} is not 'wWcC' (word orders 1..W >= 1, char orders 1..C)")
        return NgramSpec(int(m[1]), int(m[2]))

    def __str__(self) -> str:
        return f"w{self.words}c{self.chars}"


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Transformer from "Attention Is All You Need" plus its task head.

    Paper names: d_model, n_heads, n_layers (encoder), d_ff, dropout, max_len.
    """

    task: Task
    vocab_size: int
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4  # encoder layers
    n_decoder_layers: int = 3  # translation only
    d_ff: int = 1024
    dropout: float = 0.1
    attn_dropout: float = 0.0
    max_len: int = 512
    norm_first: bool = True  # pre-norm trains more stably; False is the paper's post-norm
    tie_embeddings: bool = True  # shared source/target/output embedding (one shared vocabulary)
    activation: Activation = "relu"  # of the feed-forward layers
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) (paper, section 3.4)
    layer_norm_eps: float = 1e-5  # every LayerNorm's epsilon (torch's default; imported models carry theirs)
    # sinusoid layout: "interleaved" sin/cos on even/odd dims (ours), "sin_cos" all sines then all cosines
    # (Marian, CTranslate2); the same frequencies either way
    positions: Literal["interleaved", "sin_cos"] = "interleaved"
    logits_bias: bool = False  # a bias on the output projection (Marian's final_logits_bias)
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    # sentiment
    labels: tuple[str, ...] = ()
    pooling: Literal["mean", "cls"] = "mean"
    truncation: Literal["head", "head_tail"] = "head"  # inputs over max_len tokens keep the head (and tail)
    cls_id: int | None = None  # token prepended when pooling == "cls"
    # optional hashed n-gram head (model.ngram) whose logits add to the encoder's: spec "wWcC", "" = none
    ngram: str = ""
    ngram_buckets: int = 0
    # the logits are divided by it before the softmax: 1.0 is the model as trained; `python -m training
    # calibrate` fits it on the validation split so that a score of 0.8 is right about 80% of the time.
    # It never changes a label
    temperature: float = 1.0
    # translation
    source_langs: tuple[str, ...] = ()
    target_langs: tuple[str, ...] = ()
    # target-language token ids when one model serves several target languages: in "decoder" position the
    # tag replaces BOS as the decoder's first token (ours); in "source" position it is the source's first
    # token (OPUS-MT's ">>fra<<") and the decoder starts from decoder_start_id
    target_lang_ids: dict[str, int] = field(default_factory=dict)
    target_lang_position: Literal["decoder", "source"] = "decoder"
    decoder_start_id: int | None = None  # the decoder's first token when not a target tag; None = bos_id
    # "transformer": ours (model.classifier / model.translator); "xlm-roberta": an imported XLM-R classifier
    # (model.xlmr: learned positions, embedding LayerNorm, dense-tanh head)
    architecture: Literal["transformer", "xlm-roberta"] = "transformer"

    def __post_init__(self) -> None:
        self._check_types()
        for name, limit in SIZE_LIMITS.items():
            value, floor = getattr(self, name), SIZE_FLOORS.get(name, 1)
            if not floor <= value <= limit:
                raise ValueError(f"{name}={value} is outside {floor}..{limit:,} (model.config.SIZE_LIMITS)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.activation not in ("relu", "gelu", "swish"):
            raise ValueError(f"activation must be relu, gelu or swish, got {self.activation!r}")
        if self.positions not in ("interleaved", "sin_cos"):
            raise ValueError(f"positions must be 'interleaved' or 'sin_cos', got {self.positions!r}")
        if self.target_lang_position not in ("decoder", "source"):
            raise ValueError(
                f"target_lang_position must be 'decoder' or 'source', got {self.target_lang_position!r}"
            )
        if self.architecture not in ("transformer", "xlm-roberta"):
            raise ValueError(
                f"architecture must be 'transformer' or 'xlm-roberta', got {self.architecture!r}"
            )
        if self.architecture == "xlm-roberta" and self.task != "sentiment":
            raise ValueError("architecture 'xlm-roberta' is a sentiment classifier")
        if self.task not in ("sentiment", "translation"):
            raise ValueError(f"task must be 'sentiment' or 'translation', got {self.task!r}")
        if self.task == "sentiment" and len(self.labels) < 2:
            raise ValueError(f"a sentiment model needs at least 2 labels, got {self.labels!r}")
        if self.ngram:
            if self.task != "sentiment":
                raise ValueError(f"an n-gram head is for sentiment models, not {self.task!r}")
            NgramSpec.parse(self.ngram)
            if self.ngram_buckets < 1:
                raise ValueError(f"ngram={self.ngram!r} needs ngram_buckets >= 1, got {self.ngram_buckets}")
        if not 0.0 < self.layer_norm_eps <= 0.1:
            raise ValueError(f"layer_norm_eps must be in (0, 0.1], got {self.layer_norm_eps!r}")
        if not 0.0 < self.temperature < float("inf"):
            raise ValueError(f"temperature must be a positive finite number, got {self.temperature!r}")
        if self.task != "sentiment" and self.temperature != 1.0:
            raise ValueError(f"a temperature is for sentiment models, not {self.task!r}")
        if self.pooling == "cls" and self.cls_id is None:
            raise ValueError("pooling='cls' needs cls_id")
        if self.task == "translation" and not (self.source_langs and self.target_langs):
            raise ValueError("a translation model needs source_langs and target_langs")
        for name in ("pad_id", "unk_id", "bos_id", "eos_id", "decoder_start_id"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(
                    f"{name}={getattr(self, name)} is outside the vocabulary (size {self.vocab_size})"
                )

    def _check_types(self) -> None:
        """Each field of the JSON type its annotation names (bool is no int here: "d_model": true is wrong)."""
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), _KINDS.get(str(f.type))
            if kind is None or (value is None and str(f.type).endswith("| None")):
                continue
            if type(value) not in kind:
                names = " or ".join(sorted({t.__name__ for t in kind} - {"NoneType"}))
                raise ValueError(f"{f.name} must be {names}, got {value!r} ({type(value).__name__})")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def _tag(self, target_lang: str | None) -> int:
        if target_lang not in self.target_lang_ids:
            raise ValueError(f"target_lang {target_lang!r} not in {sorted(self.target_lang_ids)}")
        return self.target_lang_ids[target_lang]

    def start_id(self, target_lang: str | None = None) -> int:
        """First decoder token: the target-language tag of a multilingual decoder, else decoder_start_id
        (default BOS)."""
        if self.target_lang_ids and self.target_lang_position == "decoder":
            return self._tag(target_lang)
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    @property
    def max_source_len(self) -> int:
        """Source ids (EOS included) that fit: max_len, less one for a target-language tag on the source side."""
        return self.max_len - (1 if self.target_lang_ids and self.target_lang_position == "source" else 0)

    def source_prefix(self, target_lang: str | None = None) -> list[int]:
        """Ids put before a source's pieces: the target-language tag when tags go on the source side."""
        if self.target_lang_ids and self.target_lang_position == "source":
            return [self._tag(target_lang)]
        return []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {unknown}")
        data = dict(data)
        for key in ("labels", "source_langs", "target_langs"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


# the JSON types of ModelConfig's scalar fields, by annotation (the others are checked by value)
_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "int | None": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}

"""Checkpoint -> CTranslate2 model directory: the converter behind `python -m training export --format
ctranslate2` and the server's CTranslate2 engine (APP_TRANSLATION_ENGINE=ctranslate2).

The directory holds model.bin (float32 weights; pick int8 at load: `ctranslate2.Translator(DIR,
compute_type="int8")`), config.json, shared_vocabulary.json (the sentencepiece pieces in id order) and the
checkpoint's tokenizer.model. Input: the source's sentencepiece pieces (CTranslate2 appends </s>, as
`model.preprocess.source_ids` does). ctranslate2 is optional: imported only when it is used.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.checkpoint import TOKENIZER, load_checkpoint
from model.tokenizer import Tokenizer
from model.translator import Translator

if TYPE_CHECKING:
    from ctranslate2.specs import TransformerSpec, common_spec

INSTALL_HINT = "ctranslate2 is not installed: pip install 'transformer-serving[ctranslate2]' (or pip install ctranslate2)"


def require_ctranslate2() -> ModuleType:
    """The ctranslate2 module; ImportError with the install command when it is missing."""
    try:
        return importlib.import_module("ctranslate2")
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def _linear(spec: common_spec.LinearSpec, *layers: torch.nn.Linear) -> None:
    """Set a CTranslate2 linear from one nn.Linear, or from several fused along the output dim (q|k|v, k|v)."""
    spec.weight = np.concatenate([_array(m.weight) for m in layers])  # (sum out, in)
    biases = [m.bias for m in layers]
    if all(b is not None for b in biases):
        spec.bias = np.concatenate([_array(b) for b in biases if b is not None])


def _norm(spec: common_spec.LayerNormSpec, norm: torch.nn.Module) -> None:
    assert isinstance(norm, torch.nn.LayerNorm), type(norm)
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def ctranslate2_spec(model: Translator, tokenizer: Tokenizer) -> TransformerSpec:
    """Our Translator as a CTranslate2 TransformerSpec (float32, not yet validated or saved).

    Mapping: pre- or post-norm layers, final encoder/decoder LayerNorms (pre-norm), the FFN activation,
    embeddings times sqrt(d_model) or not, the checkpoint's sinusoid table as is (interleaved or sin|cos),
    one embedding matrix for source, target and output (aliased on save). The output projection gets the
    model's logits bias (0 without one), -inf on the tokens our decoder never emits (`Translator.banned`: pad, BOS, target-language tags), so no
    CTranslate2 option is needed to ban them.
    """
    specs = require_ctranslate2().specs
    ACTIVATIONS = {
        "relu": specs.Activation.RELU,
        "gelu": specs.Activation.GELU,
        "swish": specs.Activation.SWISH,
    }

    cfg = model.cfg
    spec = specs.TransformerSpec.from_config(
        (cfg.n_layers, cfg.n_decoder_layers),
        cfg.n_heads,
        pre_norm=cfg.norm_first,
        activation=ACTIVATIONS[cfg.activation],
    )
    positions = _array(model.src_embed.pe)  # (max_len, D), in the checkpoint's layout
    enc, dec = spec.encoder, spec.decoder
    enc.scale_embeddings = dec.scale_embeddings = cfg.scale_embeddings
    enc.embeddings[0].weight = _array(model.src_embed.token.weight)
    enc.position_encodings.encodings = positions
    for layer, ours in zip(enc.layer, model.encoder.layers, strict=True):
        attn = ours.self_attn
        _norm(layer.self_attention.layer_norm, ours.res1.norm)
        _linear(layer.self_attention.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
        _linear(layer.self_attention.linear[1], attn.out_proj)
        _norm(layer.ffn.layer_norm, ours.res2.norm)
        _linear(layer.ffn.linear_0, ours.ff.net[0])
        _linear(layer.ffn.linear_1, ours.ff.net[3])
    dec.embeddings.weight = _array(model.tgt_embed.token.weight)
    dec.position_encodings.encodings = positions
    for layer, ours in zip(dec.layer, model.decoder.layers, strict=True):
        self_attn, cross = ours.self_attn, ours.cross_attn
        _norm(layer.self_attention.layer_norm, ours.res1.norm)
        _linear(layer.self_attention.linear[0], self_attn.q_proj, self_attn.k_proj, self_attn.v_proj)
        _linear(layer.self_attention.linear[1], self_attn.out_proj)
        _norm(layer.attention.layer_norm, ours.res2.norm)
        _linear(layer.attention.linear[0], cross.q_proj)
        _linear(layer.attention.linear[1], cross.k_proj, cross.v_proj)
        _linear(layer.attention.linear[2], cross.out_proj)
        _norm(layer.ffn.layer_norm, ours.res3.norm)
        _linear(layer.ffn.linear_0, ours.ff.net[0])
        _linear(layer.ffn.linear_1, ours.ff.net[3])
    if cfg.norm_first:
        _norm(enc.layer_norm, model.encoder.norm)
        _norm(dec.layer_norm, model.decoder.norm)
    dec.projection.weight = _array(model.generator.weight)
    bias = np.zeros(cfg.vocab_size, dtype=np.float32)
    if model.generator.bias is not None:  # Marian's final_logits_bias
        bias = _array(model.generator.bias)
    bias[model.banned.cpu().numpy()] = -np.inf
    dec.projection.bias = bias

    pieces = tokenizer.pieces(list(range(cfg.vocab_size)))
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    config = spec.config
    config.layer_norm_epsilon = model.encoder.layers[0].res1.norm.eps  # torch's 1e-5, CTranslate2's 1e-6
    config.unk_token, config.bos_token, config.eos_token = (
        pieces[cfg.unk_id],
        pieces[cfg.bos_id],
        pieces[cfg.eos_id],
    )
    config.add_source_eos = True  # sources end in EOS (model.preprocess.source_ids)
    # a multilingual decoder starts from its target-language tag: then the caller passes it as target_prefix
    tag_first = cfg.target_lang_ids and cfg.target_lang_position == "decoder"
    config.decoder_start_token = None if tag_first else pieces[cfg.start_id()]
    return spec


def export_ctranslate2(checkpoint: str | Path, out: str | Path, force: bool = False) -> Path:
    """Convert a translator checkpoint into the CTranslate2 model directory `out` (replaced if `force`)."""
    out = Path(out)
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists (--force replaces it)")
    loaded = load_checkpoint(checkpoint)
    if not isinstance(loaded.model, Translator):
        raise ValueError(
            f"{checkpoint}: a {loaded.config.task} model; only translators export to CTranslate2"
        )
    spec = ctranslate2_spec(loaded.model, loaded.tokenizer)
    spec.register_file(str(loaded.tokenizer.path), TOKENIZER)
    spec.validate()
    spec.optimize(quantization="float32")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from a service user
    try:
        spec.save(str(tmp))  # complete before it replaces anything
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out

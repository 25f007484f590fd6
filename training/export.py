"""Export a translator checkpoint to a CTranslate2 model directory, so it runs in CTranslate2-based stacks.

  python -m training export --format ctranslate2 --checkpoint checkpoints/translate-fr-en --out DIR [--force]

The directory holds model.bin (float32 weights; pick int8 at load: `ctranslate2.Translator(DIR,
compute_type="int8")`), config.json, shared_vocabulary.json (the sentencepiece pieces in id order) and the
checkpoint's tokenizer.model. Input: the source's sentencepiece pieces (CTranslate2 appends </s>, as
`model.preprocess.source_ids` does). `ctranslate2_options` maps our `DecodeOptions` to `translate_batch`
options; with them CTranslate2 float32 returns the tokens our decoder returns (`translate_ids_ctranslate2`).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from model import DecodeOptions, ModelConfig, Tokenizer, Translator, load_checkpoint
from model.checkpoint import TOKENIZER
from model.inference import length_sorted_chunks

if TYPE_CHECKING:
    import ctranslate2
    from ctranslate2.specs import TransformerSpec, common_spec

FORMATS = ("ctranslate2",)
NO_EARLY_EXIT = 1e-20  # a length penalty != 0 that leaves every score unchanged (ctranslate2_options)
INSTALL_HINT = "ctranslate2 is not installed: pip install 'transformer-serving[ctranslate2]'"


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

    Mapping: pre- or post-norm layers, final encoder/decoder LayerNorms (pre-norm), ReLU FFN, embeddings times
    sqrt(d_model), our interleaved sinusoid table (CTranslate2's own concatenates sin|cos), one embedding
    matrix for source, target and output (aliased on save). The output projection gets a bias of 0, -inf on
    the tokens our decoder never emits (`Translator.banned`: pad, BOS, target-language tags), so no
    CTranslate2 option is needed to ban them.
    """
    import ctranslate2.specs as specs

    cfg = model.cfg
    spec = specs.TransformerSpec.from_config(
        (cfg.n_layers, cfg.n_decoder_layers),
        cfg.n_heads,
        pre_norm=cfg.norm_first,
        activation=specs.Activation.RELU,
    )
    positions = _array(model.src_embed.pe)  # (max_len, D): sin on even, cos on odd dims
    enc, dec = spec.encoder, spec.decoder
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
    config.decoder_start_token = None if cfg.target_lang_ids else pieces[cfg.bos_id]
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


def ctranslate2_options(options: DecodeOptions, src_lens: Sequence[int], cfg: ModelConfig) -> dict[str, Any]:
    """`translate_batch` keyword arguments with which CTranslate2 decodes as `options` do, for a batch of
    sources of these lengths (ids, EOS included).

    - Length limit: ours counts EOS and forces it at the limit; CTranslate2's max_decoding_length stops
      without EOS. So its max is our limit - 1: the same tokens whenever an output ends before the limit, and
      greedy always. One max per batch (the longest source's): in a batch a shorter source could run past
      its own limit (never seen on the test split).
    - Length penalty: ours is GNMT's ((5 + |Y|) / 6) ** alpha, CTranslate2's |Y| ** alpha, so beam search
      agrees only at alpha = 0 (a ValueError otherwise). And at 0 CTranslate2 stops when its best beam ends,
      while we stop once `beam_size` hypotheses have ended (as CTranslate2 does with any penalty): it may
      then find a better-scoring hypothesis than ours (2 of the first 300 fr-en test sentences). A penalty of NO_EARLY_EXIT
      selects its rule without changing any score (|Y| ** 1e-20 == 1.0).
    - min_decoding_length 0 (ours may end at the first step), EOS not returned, sources cut as
      `model.preprocess.source_ids` cuts them (max_len positions, EOS kept).
    """
    if options.beam_size > 1 and options.length_penalty != 0:
        raise ValueError(
            f"length_penalty={options.length_penalty}: CTranslate2 has no GNMT length penalty, beam search "
            "agrees with ours only at length_penalty=0"
        )
    limit = max(min(options.limit(n), cfg.max_len) for n in src_lens)
    return {
        "beam_size": options.beam_size,
        "num_hypotheses": options.num_hypotheses,
        "length_penalty": NO_EARLY_EXIT,
        "max_decoding_length": max(1, limit - 1),
        "min_decoding_length": 0,
        "return_end_token": False,
        "max_input_length": cfg.max_len,
    }


def translate_ids_ctranslate2(
    translator: ctranslate2.Translator,
    tokenizer: Tokenizer,
    cfg: ModelConfig,
    seqs: list[list[int]],
    options: DecodeOptions,
    target_lang: str | None = None,
    batch_size: int = 64,
) -> list[list[int]]:
    """`model.inference.translate_ids` on a CTranslate2 export: the same length-sorted batches, the best
    hypothesis' token ids (no start token, no EOS) per source, in input order."""
    results: list[list[int]] = [[] for _ in seqs]
    prefix = [tokenizer.pieces([cfg.start_id(target_lang)])] if cfg.target_lang_ids else None
    for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
        sources = [tokenizer.pieces(seqs[i][:-1]) for i in chunk]  # CTranslate2 appends EOS itself
        kwargs = ctranslate2_options(options, [len(seqs[i]) for i in chunk], cfg)
        out = translator.translate_batch(sources, prefix and prefix * len(chunk), **kwargs)
        for i, res in zip(chunk, out, strict=True):
            results[i] = [tokenizer.piece_to_id(p) for p in res.hypotheses[0]]  # no start token
    return results


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--format", choices=FORMATS, required=True)
    p.add_argument("--checkpoint", type=Path, required=True, help="translator checkpoint directory")
    p.add_argument("--out", type=Path, required=True, help="output model directory")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args(argv)
    if importlib.util.find_spec("ctranslate2") is None:
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        out = export_ctranslate2(args.checkpoint, args.out, args.force)
    except (FileExistsError, ValueError) as e:  # CheckpointError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0

"""Import a Marian / OPUS-MT model (Hugging Face layout) as a checkpoint of ours.

  python -m training import marian DIR --name NAME [--out-dir checkpoints] [--source-lang fr --target-lang en]

DIR is what `huggingface_hub.snapshot_download("Helsinki-NLP/opus-mt-fr-en", local_dir=...)` leaves:
config.json, model.safetensors or pytorch_model.bin, source.spm, target.spm, vocab.json (tokenizer_config.json
and generation_config.json are not needed). Nothing is unpickled: .safetensors is read as is, and a
pytorch_model.bin only with torch.load(weights_only=True), which refuses anything but tensors.

The output (served by our torch Translator, so /attention works; exportable to CTranslate2) keeps Marian's
choices as ModelConfig fields: post-norm, its activation (swish for OPUS-MT), embeddings times sqrt(d_model),
sin|cos position table, final_logits_bias, decoding from <pad>, source.spm / target.spm over vocab.json's ids,
and multilingual targets as a source-side tag (">>fra<<").
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from model.checkpoint import save_checkpoint
from model.config import ModelConfig
from model.layers import sinusoids
from model.tokenizer import PairTokenizer
from model.translator import Translator

ORIGIN = "opus-mt"
LICENSE = "CC-BY-4.0"  # OPUS-MT models (Tiedemann & Thottingal, 2020); the model card of each says so
NAME = re.compile(r"opus-mt-([A-Za-z_]+)-([A-Za-z_]+)")
TAG = re.compile(r"^>>([A-Za-z_]+)<<$")  # a multilingual model's target-language token
# ISO 639-3 (OPUS-MT's target tags) -> ISO 639-1 (our API's codes), for the tags that have one in common use
ISO3 = {
    "ara": "ar", "cat": "ca", "ces": "cs", "dan": "da", "deu": "de", "ell": "el", "eng": "en", "fin": "fi",
    "fra": "fr", "glg": "gl", "heb": "he", "hin": "hi", "hun": "hu", "ind": "id", "ita": "it", "jpn": "ja",
    "kor": "ko", "lat": "la", "nld": "nl", "nob": "nb", "pol": "pl", "por": "pt", "ron": "ro", "rus": "ru",
    "spa": "es", "swe": "sv", "tur": "tr", "ukr": "uk", "vie": "vi", "zho": "zh",
}  # fmt: skip
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin read with weights_only=True (never a pickle's code)."""
    if (f := folder / "model.safetensors").is_file():
        return safetensors.torch.load_file(str(f))
    if (f := folder / "pytorch_model.bin").is_file():
        state = torch.load(f, map_location="cpu", weights_only=True)
        return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    raise FileNotFoundError(f"{folder}: neither model.safetensors nor pytorch_model.bin")


def languages(folder: Path, hf: dict[str, Any]) -> tuple[str, str] | None:
    """(source, target) from an opus-mt-SRC-TGT name in the path (or config.json's _name_or_path)."""
    for text in [*reversed(folder.resolve().parts), str(hf.get("_name_or_path", ""))]:
        if m := NAME.search(text):
            return m.group(1), m.group(2)
    return None


def marian_config(
    hf: dict[str, Any], vocab: dict[str, int], source_langs: list[str], target_langs: list[str]
) -> ModelConfig:
    """Our ModelConfig for a transformers MarianConfig (config.json); ValueError on a choice we lack."""
    act = ACTIVATIONS.get(hf.get("activation_function", "swish"))
    if act is None:
        raise ValueError(
            f"activation_function={hf['activation_function']!r} is not one of {sorted(ACTIVATIONS)}"
        )
    for a, b in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if hf.get(a, 8) != hf.get(b, 8):
            raise ValueError(f"{a}={hf.get(a)} != {b}={hf.get(b)}: one value for both stacks is supported")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm"):
        raise ValueError(
            "pre-norm Marian variants (normalize_before / add_final_layer_norm) are not supported"
        )
    if hf["vocab_size"] != len(vocab):
        raise ValueError(f"config.json vocab_size={hf['vocab_size']}, vocab.json has {len(vocab)} pieces")
    tags = {m.group(1): i for p, i in vocab.items() if (m := TAG.match(p))}
    target_lang_ids = {}
    codes = [lang for lang in target_langs if not lang.isupper()]  # upper case: a group (ROMANCE)
    if tags and (len(target_langs) > 1 or not codes):  # a multilingual target: our code -> its tag's id
        by_code = {ISO3.get(t, t): i for t, i in tags.items()}
        chosen = codes or sorted(by_code)  # a group name alone: every tag
        missing = [lang for lang in chosen if lang not in by_code]
        if missing:
            raise ValueError(f"target languages {missing} have no >>tag<< in vocab.json ({sorted(by_code)})")
        target_lang_ids = {lang: by_code[lang] for lang in chosen}
        target_langs = sorted(target_lang_ids)
    if not [lang for lang in source_langs if not lang.isupper()]:
        raise ValueError(f"source {source_langs} names a group: give --source-lang with its language codes")
    pad = hf.get("pad_token_id", vocab["<pad>"])
    return ModelConfig(
        task="translation",
        vocab_size=len(vocab),
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        n_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        d_ff=hf["encoder_ffn_dim"],
        dropout=0.0,
        max_len=hf["max_position_embeddings"],
        norm_first=False,
        tie_embeddings=bool(
            hf.get("share_encoder_decoder_embeddings", True) and hf.get("tie_word_embeddings", True)
        ),
        activation=act,  # type: ignore[arg-type]
        scale_embeddings=bool(hf.get("scale_embedding", True)),
        positions="sin_cos",
        logits_bias=True,
        pad_id=pad,
        unk_id=vocab["<unk>"],
        bos_id=pad,  # Marian has no BOS
        eos_id=hf.get("eos_token_id", vocab["</s>"]),
        decoder_start_id=hf.get("decoder_start_token_id", pad),
        source_langs=tuple(source_langs),
        target_langs=tuple(target_langs),
        target_lang_ids=target_lang_ids,
        target_lang_position="source",
    )


def _first(state: dict[str, torch.Tensor], *names: str) -> torch.Tensor:
    for name in names:
        if name in state:
            return state[name]
    raise KeyError(f"the weights have none of {names}")


def marian_state(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """transformers' MarianMTModel tensor names -> ours (Translator.state_dict names)."""
    out: dict[str, torch.Tensor] = {}
    shared = ("model.shared.weight",)
    out["src_embed.token.weight"] = _first(hf_state, "model.encoder.embed_tokens.weight", *shared)
    out["tgt_embed.token.weight"] = _first(hf_state, "model.decoder.embed_tokens.weight", *shared)
    out["generator.weight"] = _first(hf_state, "lm_head.weight", "model.decoder.embed_tokens.weight", *shared)
    out["generator.bias"] = _first(hf_state, "final_logits_bias").reshape(-1)
    attn = ("q_proj", "k_proj", "v_proj", "out_proj")
    names = {  # ours -> theirs, within a layer
        "encoder": {"self_attn": "self_attn", "res1.norm": "self_attn_layer_norm", "ff.net.0": "fc1",
                    "ff.net.3": "fc2", "res2.norm": "final_layer_norm"},
        "decoder": {"self_attn": "self_attn", "res1.norm": "self_attn_layer_norm", "cross_attn": "encoder_attn",
                    "res2.norm": "encoder_attn_layer_norm", "ff.net.0": "fc1", "ff.net.3": "fc2",
                    "res3.norm": "final_layer_norm"},
    }  # fmt: skip
    for stack, n in (("encoder", cfg.n_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            for ours, theirs in names[stack].items():
                parts = [f"{p}." for p in attn] if ours.endswith("attn") else [""]
                for part in parts:
                    for kind in ("weight", "bias"):
                        out[f"{stack}.layers.{i}.{ours}.{part}{kind}"] = hf_state[
                            f"model.{stack}.layers.{i}.{theirs}.{part}{kind}"
                        ]
    for stack in ("encoder", "decoder"):  # the stored position table, when present, must be ours
        if (pe := hf_state.get(f"model.{stack}.embed_positions.weight")) is not None:
            want = sinusoids(cfg.max_len, cfg.d_model, cfg.positions)
            if pe.shape != want.shape or not torch.allclose(pe.float(), want, atol=1e-5):
                raise ValueError(f"model.{stack}.embed_positions differs from Marian's sin|cos table")
    return out


def import_marian(
    folder: str | Path,
    out: str | Path,
    source_langs: list[str] | None = None,
    target_langs: list[str] | None = None,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Convert the OPUS-MT folder into the checkpoint directory `out`; returns its path."""
    folder, out = Path(folder), Path(out)
    for name in ("config.json", "source.spm", "target.spm", "vocab.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name}: missing (is {folder} an OPUS-MT download?)")
    hf = json.loads((folder / "config.json").read_text())
    if hf.get("model_type", "marian") != "marian":
        raise ValueError(f"{folder / 'config.json'}: model_type={hf.get('model_type')!r}, not 'marian'")
    vocab = json.loads((folder / "vocab.json").read_text())
    found = languages(folder, hf)
    if not (source_langs and target_langs) and found is None:
        raise ValueError(f"{folder}: no opus-mt-SRC-TGT in its path: give --source-lang and --target-lang")
    src = source_langs or found[0].split("_")  # type: ignore[index]
    tgt = target_langs or found[1].split("_")  # type: ignore[index]
    cfg = marian_config(hf, vocab, src, tgt)
    PairTokenizer(folder / "source.spm", folder / "target.spm", vocab)  # fails here, not at serving
    model = Translator(cfg, init=False)
    state = marian_state(read_weights(folder), cfg)
    model.load_state_dict(state, strict=True)
    card = (
        f"# {out.name}\n\nImported from the OPUS-MT (Marian) model in `{folder.name}` by "
        f"`python -m training import marian`.\n\nLicense: {LICENSE} (OPUS-MT; attribute Helsinki-NLP / "
        "Tiedemann & Thottingal, 2020, and check the original model card).\n"
    )
    source = {"source": str(folder.name), "license": LICENSE, "hf_config": hf}
    return save_checkpoint(
        out,
        model,
        folder / "source.spm",
        dtype=dtype,
        training={"imported": source},
        card=card,
        target_tokenizer_path=folder / "target.spm",
        vocab=vocab,
        origin=ORIGIN,
    )


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training import",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("family", choices=["marian"], help="the model family (marian: OPUS-MT)")
    p.add_argument(
        "dir",
        type=Path,
        help="the downloaded model folder (model.safetensors, or pytorch_model.bin read with "
        "torch.load(weights_only=True): never unpickled)",
    )
    p.add_argument("--name", required=True, help="the checkpoint (and served model) name")
    p.add_argument("--out-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--source-lang", nargs="+", help="default: SRC of an opus-mt-SRC-TGT folder name")
    p.add_argument("--target-lang", nargs="+", help="default: TGT of an opus-mt-SRC-TGT folder name")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="stored weights")
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint of that name")
    args = p.parse_args(argv)
    out = args.out_dir / args.name
    if out.exists() and not args.force:
        p.error(f"{out} already exists (--force replaces it)")
    try:
        path = import_marian(args.dir, out, args.source_lang, args.target_lang, getattr(torch, args.dtype))
    except (OSError, ValueError, KeyError) as e:
        p.error(str(e))
    print(f"wrote {path}")  # noqa: T201
    return 0

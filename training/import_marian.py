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

Every published layout: opus-mt-SRC-TGT; opus-mt-tc-big-SRC-TGT (relu, a "<s>" piece in vocab.json that is
no BOS); multilingual targets (opus-mt-en-ROMANCE, opus-mt-tc-big-en-zle: the >>xxx<< tokens); multilingual
sources (opus-mt-mul-en: --source-lang names the languages to serve). Languages come from the flags, else the
name, else (targets) the >>xxx<< tokens.
"""

from __future__ import annotations

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
from training.import_check import ImportFailed

ORIGIN = "opus-mt"
LICENSE = "CC-BY-4.0"  # OPUS-MT models (Tiedemann & Thottingal, 2020); the model card of each says so
CODES = r"[A-Za-z]+(?:_[A-Za-z]+)*"  # "fr", "ROMANCE", "cat_oci_spa"
# opus-mt-SRC-TGT and the Tatoeba-Challenge releases' opus-mt-tc-big-SRC-TGT (tc-base, ...): the name's end
NAME = re.compile(rf"opus-mt-(?:tc-[a-z]+-)?({CODES})-({CODES})$")
TAG = re.compile(r"^>>([A-Za-z_]+)<<$")  # a multilingual model's target-language token
# ISO 639-3 (OPUS-MT's tags and tc-big names) -> ISO 639-1 (our API's codes), for the common ones
ISO3 = {
    "afr": "af", "ara": "ar", "bel": "be", "ben": "bn", "bos": "bs", "bre": "br", "bul": "bg", "cat": "ca",
    "ces": "cs", "cym": "cy", "dan": "da", "deu": "de", "ell": "el", "eng": "en", "epo": "eo", "est": "et",
    "eus": "eu", "fas": "fa", "fin": "fi", "fra": "fr", "gle": "ga", "glg": "gl", "heb": "he", "hin": "hi",
    "hrv": "hr", "hun": "hu", "hye": "hy", "ind": "id", "isl": "is", "ita": "it", "jpn": "ja", "kat": "ka",
    "kor": "ko", "lat": "la", "lav": "lv", "lit": "lt", "ltz": "lb", "mkd": "mk", "msa": "ms", "nld": "nl",
    "nno": "nn", "nob": "nb", "nor": "no", "oci": "oc", "pol": "pl", "por": "pt", "ron": "ro", "rus": "ru",
    "slk": "sk", "slv": "sl", "spa": "es", "sqi": "sq", "srp": "sr", "swe": "sv", "tha": "th", "tur": "tr",
    "ukr": "uk", "urd": "ur", "vie": "vi", "zho": "zh",
}  # fmt: skip
# ISO 639-5 language groups in OPUS-MT names (opus-mt-mul-en, opus-mt-tc-big-en-zle); upper case
# (ROMANCE, SCANDINAVIA) is a group too. A group names no language we could serve by itself.
GROUPS = frozenset(
    [
        "aav",
        "afa",
        "alv",
        "art",
        "ath",
        "aus",
        "bat",
        "ber",
        "bnt",
        "cau",
        "ccs",
        "cdc",
        "cel",
        "cpf",
        "cpp",
        "crp",
        "cus",
        "dra",
        "euq",
        "fiu",
        "gem",
        "gmq",
        "gmw",
        "grk",
        "hyx",
        "iir",
        "inc",
        "ine",
        "ira",
        "iro",
        "itc",
        "jpx",
        "kro",
        "map",
        "mkh",
        "mul",
        "nic",
        "phi",
        "poz",
        "pqe",
        "roa",
        "sal",
        "sem",
        "sit",
        "sla",
        "smi",
        "sqj",
        "ssa",
        "tai",
        "trk",
        "tut",
        "urj",
        "zhx",
        "zle",
        "zls",
        "zlw",
    ]  # noqa: SIM905 (56 quoted strings read worse)
)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
NAME_HELP = "opus-mt-SRC-TGT or opus-mt-tc-big-SRC-TGT"


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin read with weights_only=True (never a pickle's code);
    ValueError naming the file when it cannot be read as such."""
    if (f := folder / "model.safetensors").is_file():
        try:
            return safetensors.torch.load_file(str(f))
        except Exception as e:  # safetensors' own SafetensorError: a bad header, a short body
            raise ValueError(f"{f}: not a valid safetensors file ({e})") from e
    if (f := folder / "pytorch_model.bin").is_file():
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # pickle.UnpicklingError: more than tensors (code it would have to run)
            first = " ".join(str(e).split())[:200]
            raise ValueError(
                f"{f}: refused by torch.load(weights_only=True), not plain tensors ({first})"
            ) from e
        if not isinstance(state, dict):
            raise ValueError(f"{f}: holds a {type(state).__name__}, not a dict of tensors")
        return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    raise FileNotFoundError(f"{folder}: neither model.safetensors nor pytorch_model.bin")


def code(lang: str) -> str:
    """A name's or tag's language code as the API writes it: ISO 639-3 -> 639-1 where common."""
    return ISO3.get(lang, lang)


def is_group(lang: str) -> bool:
    return lang.isupper() or lang in GROUPS


def name_languages(folder: Path, hf: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """(sources, targets) from an opus-mt name: the folder's (or a parent's, as in a hub cache), else
    config.json's _name_or_path; "fr_it" lists two languages; groups are kept as written."""
    for text in [*reversed(folder.resolve().parts), str(hf.get("_name_or_path", ""))]:
        if m := NAME.search(text):
            return m.group(1).split("_"), m.group(2).split("_")
    return None


def resolve_languages(
    folder: Path,
    hf: dict[str, Any],
    vocab: dict[str, int],
    source_langs: list[str] | None,
    target_langs: list[str] | None,
) -> tuple[list[str], list[str]]:
    """(sources, targets) from the flags, else the name, else (targets) the >>xxx<< tokens; a group (mul,
    zle, ROMANCE) as source needs --source-lang, as target the tokens. ImportFailed says what to pass."""
    found = name_languages(folder, hf)
    tags = sorted({code(m.group(1)) for p in vocab if (m := TAG.match(p))})
    src = source_langs or (found[0] if found else None)
    if src is None:
        raise ImportFailed(
            f"cannot read the languages from {folder.name!r} (expected {NAME_HELP}): give --source-lang"
            + ("" if tags else " and --target-lang")
        )
    if not (sources := [code(s) for s in src if not is_group(s)]):
        raise ImportFailed(
            f"source {'_'.join(src)!r} is a language group: give --source-lang with the languages to serve "
            "(e.g. --source-lang de fr)"
        )
    tgt = target_langs or (found[1] if found else None)
    if tgt is None or not [t for t in tgt if not is_group(t)]:
        if not tags:
            shown = f"target {'_'.join(tgt)!r} is a language group" if tgt else "no target language"
            raise ImportFailed(f"{shown} and vocab.json has no >>xxx<< tokens: give --target-lang")
        return sources, tags  # a group, or no name: every target token
    return sources, [code(t) for t in tgt if not is_group(t)]


def marian_config(
    hf: dict[str, Any], vocab: dict[str, int], source_langs: list[str], target_langs: list[str]
) -> ModelConfig:
    """Our ModelConfig for a transformers MarianConfig (config.json) serving `source_langs` ->
    `target_langs` (resolve_languages' codes); ValueError on a choice we lack."""
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
    by_code = {code(m.group(1)): i for p, i in vocab.items() if (m := TAG.match(p))}
    target_lang_ids = {}
    if by_code and (len(target_langs) > 1 or target_langs[0] in by_code):  # the tag picks the target
        missing = [lang for lang in target_langs if lang not in by_code]
        if missing:
            raise ValueError(f"target languages {missing} have no >>tag<< in vocab.json ({sorted(by_code)})")
        target_lang_ids = {lang: by_code[lang] for lang in target_langs}
        target_langs = sorted(target_lang_ids)
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
    cfg = marian_config(hf, vocab, *resolve_languages(folder, hf, vocab, source_langs, target_langs))
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

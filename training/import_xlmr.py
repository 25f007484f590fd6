"""Import an XLM-RoBERTa sequence classifier (Hugging Face layout) as a sentiment checkpoint of ours.

  python -m training import xlm-roberta DIR --name NAME --lang en fr de [--verify]

DIR holds config.json (model_type xlm-roberta, its id2label), sentencepiece.bpe.model, and model.safetensors
or pytorch_model.bin (read with torch.load(weights_only=True): never unpickled). The languages it classifies
come from --lang (its card says which; the config does not): /sentiment routes texts of those languages to it
like ours. Served by model.xlmr.XLMRClassifier with model.tokenizer.FairseqTokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import save_checkpoint
from model.config import ModelConfig
from model.xlmr import XLMRClassifier
from training.import_check import ImportFailed
from training.import_marian import read_weights

ORIGIN = "xlm-roberta"
SPM = "sentencepiece.bpe.model"


def xlmr_config(hf: dict[str, Any], langs: list[str]) -> ModelConfig:
    """Our ModelConfig for a transformers XLMRobertaConfig; ImportFailed on a choice we lack."""
    wants = {
        "model_type": ("xlm-roberta", "roberta"),
        "hidden_act": ("gelu",),
        "position_embedding_type": ("absolute",),
    }
    for key, allowed in wants.items():
        if key in hf and hf[key] not in allowed:
            raise ImportFailed(
                f"config.json {key}={hf[key]!r}: only {', '.join(map(repr, allowed))} is supported"
            )
    if hf.get("is_decoder") or hf.get("problem_type") not in (None, "single_label_classification"):
        raise ImportFailed("config.json: only single-label sequence classification is supported")
    labels = hf.get("id2label") or {}
    ids = sorted(int(i) for i in labels)
    if len(ids) < 2 or ids != list(range(len(ids))):
        raise ImportFailed(f"config.json id2label={labels!r}: needs labels 0..C-1, C >= 2")
    pad = hf.get("pad_token_id", 1)
    return ModelConfig(
        task="sentiment",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        dropout=0.0,
        max_len=hf["max_position_embeddings"] - pad - 1,  # positions start after padding_idx
        norm_first=False,
        activation="gelu",
        scale_embeddings=False,
        # the published XLM-R checkpoints say 1e-5; a config without it has transformers' default, 1e-12
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
        pad_id=pad,
        unk_id=3,
        bos_id=hf.get("bos_token_id", 0),
        eos_id=hf.get("eos_token_id", 2),
        labels=tuple(str(labels[str(i)] if str(i) in labels else labels[i]) for i in ids),
        pooling="cls",
        cls_id=hf.get("bos_token_id", 0),
        source_langs=tuple(langs),
        architecture="xlm-roberta",
    )


def xlmr_state(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """transformers' XLMRobertaForSequenceClassification tensor names -> ours (XLMRClassifier)."""
    e = "roberta.embeddings."
    out = {
        "embed.token.weight": hf_state[e + "word_embeddings.weight"],
        # one token type: its embedding is a constant, folded into every position's row
        "embed.position.weight": hf_state[e + "position_embeddings.weight"]
        + hf_state[e + "token_type_embeddings.weight"][0],
        "embed.norm.weight": hf_state[e + "LayerNorm.weight"],
        "embed.norm.bias": hf_state[e + "LayerNorm.bias"],
    }
    names = {  # ours -> theirs, within a layer
        "self_attn.q_proj": "attention.self.query", "self_attn.k_proj": "attention.self.key",
        "self_attn.v_proj": "attention.self.value", "self_attn.out_proj": "attention.output.dense",
        "res1.norm": "attention.output.LayerNorm", "ff.net.0": "intermediate.dense", "ff.net.3": "output.dense",
        "res2.norm": "output.LayerNorm",
    }  # fmt: skip
    for i in range(cfg.n_layers):
        for ours, theirs in names.items():
            for kind in ("weight", "bias"):
                out[f"encoder.layers.{i}.{ours}.{kind}"] = hf_state[
                    f"roberta.encoder.layer.{i}.{theirs}.{kind}"
                ]
    for part in ("dense", "out_proj"):
        for kind in ("weight", "bias"):
            out[f"head.{part}.{kind}"] = hf_state[f"classifier.{part}.{kind}"]
    return out


def import_xlmr(
    folder: str | Path, out: str | Path, langs: list[str] | None, dtype: torch.dtype = torch.float32
) -> Path:
    """Convert the XLM-R classifier folder into the checkpoint directory `out`; returns its path."""
    folder, out = Path(folder), Path(out)
    for name in ("config.json", SPM):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name}: missing (is {folder} an XLM-R classifier download?)")
    if not langs:
        raise ImportFailed("give --lang with the languages it classifies (its model card says which)")
    hf = json.loads((folder / "config.json").read_text())
    cfg = xlmr_config(hf, langs)
    model = XLMRClassifier(cfg, init=False)
    model.load_state_dict(xlmr_state(read_weights(folder), cfg), strict=True)
    card = (
        f"# {out.name}\n\nImported from the XLM-RoBERTa classifier in `{folder.name}` by "
        "`python -m training import xlm-roberta`.\n\nLabels: "
        f"{', '.join(cfg.labels)}. Languages served: {', '.join(langs)}.\n\nLicense: see the original model "
        "card (XLM-R itself is MIT).\n"
    )
    source = {"source": folder.name, "hf_config": hf}
    return save_checkpoint(
        out,
        model,
        folder / SPM,
        dtype=dtype,
        training={"imported": source},
        card=card,
        origin=ORIGIN,
        tokenizer_ids="fairseq",
    )

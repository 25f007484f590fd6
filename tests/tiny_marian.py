"""A tiny random Marian model in transformers' layout (what an OPUS-MT download holds), built in a test dir.

Source and target sentencepiece models are trained on the shared synthetic corpus (French and English
halves), vocab.json maps their pieces to one shared id space as OPUS-MT's does (</s> 0, <unk> 1, pieces,
<pad> last), and MarianMTModel(MarianConfig(...)).save_pretrained writes config.json + model.safetensors.
transformers is a test dependency only: import this module only from tests that need it.
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm
import torch

from tests.conftest import make_corpus

D_MODEL, HEADS, LAYERS, FFN, MAX_POS = 32, 4, 2, 64, 128


def _train_spm(lines: list[str], prefix: Path, size: int) -> Path:
    corpus = prefix.with_suffix(".txt")
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        model_type="unigram",
        vocab_size=size,
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def french_english() -> tuple[list[str], list[str]]:
    lines = make_corpus(300)
    return lines[1::3], lines[0::3]  # make_corpus: en, fr, ko per round


def build_marian(folder: Path, *, tags: tuple[str, ...] = (), seed: int = 0, activation: str = "swish") -> Path:
    """Write a tiny OPUS-MT-like folder; `tags` (e.g. ("fra", "deu")) adds >>tag<< pieces (multilingual)."""
    from transformers import MarianConfig, MarianMTModel

    folder.mkdir(parents=True, exist_ok=True)
    fr, en = french_english()
    work = folder / "spm"
    work.mkdir(exist_ok=True)
    src = _train_spm(fr, work / "source", 120)
    tgt = _train_spm(en, work / "target", 110)
    (folder / "source.spm").write_bytes(src.read_bytes())
    (folder / "target.spm").write_bytes(tgt.read_bytes())
    pieces = ["</s>", "<unk>", *(f">>{t}<<" for t in tags)]
    for path in (src, tgt):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and p not in pieces:
                pieces.append(p)
    pieces.append("<pad>")
    vocab = {p: i for i, p in enumerate(pieces)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "fr", "target_lang": "en"}))
    pad = len(pieces) - 1
    config = MarianConfig(
        vocab_size=len(pieces),
        d_model=D_MODEL,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        max_position_embeddings=MAX_POS,
        activation_function=activation,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        init_std=0.3,  # spread logits: a random model's near-ties would make greedy parity luck
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(std=0.5)  # a real bias, so the parity covers it
        for name, p in model.named_parameters():
            if "layer_norm" in name:  # non-trivial LayerNorm affine weights
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.2)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def load_reference(folder: Path):  # noqa: ANN201 (transformers types stay out of annotations)
    from transformers import MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(folder).eval()
    tokenizer = MarianTokenizer(
        str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json")
    )
    return model, tokenizer

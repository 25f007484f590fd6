"""A tiny random XLMRobertaForSequenceClassification in transformers' layout, built in a test dir.

A sentencepiece model (sentencepiece's default ids, as XLM-R's: <unk> 0, <s> 1, </s> 2) trained on the shared
synthetic corpus, saved as sentencepiece.bpe.model; config.json with id2label; every weight random at a
scale that spreads the class probabilities (LayerNorms and the token type embedding included, so parity
covers them). transformers is a test dependency only: import this module only from tests that need it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.tiny_marian import _train_spm, french_english

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
MAX_LEN = 64  # served tokens; transformers' max_position_embeddings = MAX_LEN + pad_id + 1


def build_xlmr(
    folder: Path, *, seed: int = 0, safetensors: bool = True, layer_norm_eps: float = 1e-5
) -> Path:
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    folder.mkdir(parents=True, exist_ok=True)
    fr, en = french_english()
    work = folder / "spm"
    work.mkdir(exist_ok=True)
    sp = _train_spm(fr + en, work / "xlmr", 150)
    (folder / "sentencepiece.bpe.model").write_bytes(sp.read_bytes())
    import sentencepiece as spm

    pieces = spm.SentencePieceProcessor(model_file=str(sp)).get_piece_size()
    config = XLMRobertaConfig(
        vocab_size=pieces + 2,  # fairseq's offset of 1, and <mask> last
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=MAX_LEN + 2,
        type_vocab_size=1,
        layer_norm_eps=layer_norm_eps,  # 1e-5: as the published XLM-R checkpoints (transformers': 1e-12)
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    torch.manual_seed(seed)
    model = XLMRobertaForSequenceClassification(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.normal_(1.0, 0.2)
            else:
                p.normal_(std=0.3)
    model.save_pretrained(folder, safe_serialization=safetensors)
    return folder


def load_reference(folder: Path):  # noqa: ANN201 (transformers types stay out of annotations)
    from transformers import XLMRobertaForSequenceClassification, XLMRobertaTokenizer

    model = XLMRobertaForSequenceClassification.from_pretrained(folder).eval()
    return model, XLMRobertaTokenizer(str(folder / "sentencepiece.bpe.model"))

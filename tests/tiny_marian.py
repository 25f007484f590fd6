"""A tiny random Marian model in transformers' layout (what an OPUS-MT download holds), built in a test dir.

Source and target sentencepiece models are trained on the shared synthetic corpus (French and English
halves), vocab.json maps their pieces to one shared id space as OPUS-MT's does (</s> 0, <unk> 1, pieces,
<pad> last), and MarianMTModel(MarianConfig(...)).save_pretrained writes config.json + model.safetensors.
transformers is a test dependency only: import this module only from tests that need it.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from bench.tiny import _EN, _FR
from model.preprocess import pad_ids

D_MODEL, HEADS, LAYERS, FFN, MAX_POS = 32, 4, 2, 64, 128


_SPM: dict[tuple[int, int], bytes] = {}  # (hash of the lines, size) -> model: trained once per process


def _train_spm(lines: list[str], prefix: Path, size: int) -> Path:
    key = (hash(tuple(lines)), size)
    if key in _SPM:
        prefix.with_suffix(".model").write_bytes(_SPM[key])
        return prefix.with_suffix(".model")
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
    _SPM[key] = prefix.with_suffix(".model").read_bytes()
    return prefix.with_suffix(".model")


def french_english(n: int = 400, seed: int = 0) -> tuple[list[str], list[str]]:
    """n parallel sentences: the shared corpus' word lists, aligned by position (le chat / the cat ...)."""
    rng = random.Random(seed)
    fr, en = [], []
    for _ in range(n):
        parts = []
        for slot in ("subj", "verb", "obj", "adv"):
            size = min(len(_EN[slot]), len(_FR[slot]))
            parts.append(rng.randrange(size) if slot != "adv" or rng.random() < 0.5 else None)
        end = rng.choice([".", "!", "?"])
        for words, out in ((_FR, fr), (_EN, en)):
            text = " ".join(
                words[slot][i]
                for slot, i in zip(("subj", "verb", "obj", "adv"), parts, strict=True)
                if i is not None
            )
            out.append(text.capitalize() + end)
    return fr, en


def _train(model: Any, pad: int, fr: list[list[int]], en: list[list[int]], steps: int) -> None:
    """A few hundred Adam steps on the parallel pairs: a model that ends its outputs (EOS) at varied
    lengths, as a real one does (a random one repeats a token or stops at once)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = random.Random(1)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: more threads only contend (10x slower on a loaded machine)
    try:
        _steps(model, opt, g, pad, fr, en, steps)
    finally:
        torch.set_num_threads(threads)
    model.eval()


def _steps(
    model: Any, opt: Any, g: random.Random, pad: int, fr: list[list[int]], en: list[list[int]], steps: int
) -> None:
    for _ in range(steps):
        rows = [g.randrange(len(fr)) for _ in range(32)]
        src = pad_ids([fr[i] for i in rows], pad)
        tgt = pad_ids([en[i] for i in rows], pad)
        labels = tgt.masked_fill(tgt == pad, -100)
        loss = model(input_ids=src, attention_mask=(src != pad).long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()


def build_marian(
    folder: Path,
    *,
    tags: tuple[str, ...] = (),
    seed: int = 0,
    activation: str = "swish",
    train_steps: int = 80,
    bos_piece: bool = False,
) -> Path:
    """Write a tiny OPUS-MT-like folder; `tags` (e.g. ("fra", "deu")) adds >>tag<< pieces (multilingual),
    bos_piece a "<s>" piece mid-vocabulary as the tc-big releases have (no BOS: an ordinary piece)."""
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
    if bos_piece:
        pieces.insert(len(pieces) // 2, "<s>")
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
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(
            std=0.5
        )  # a real bias (a buffer: kept by training), so parity covers it
    if train_steps:
        src_sp = spm.SentencePieceProcessor(model_file=str(src))
        tgt_sp = spm.SentencePieceProcessor(model_file=str(tgt))

        def ids(sp: spm.SentencePieceProcessor, text: str) -> list[int]:
            return [vocab.get(p, 1) for p in sp.encode(text, out_type=str)] + [0]

        _train(model, pad, [ids(src_sp, t) for t in fr], [ids(tgt_sp, t) for t in en], train_steps)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def load_reference(folder: Path):  # noqa: ANN201 (transformers types stay out of annotations)
    from transformers import MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(folder).eval()
    with warnings.catch_warnings():  # without sacremoses it skips Moses punctuation normalization, as we do
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        tokenizer = MarianTokenizer(
            str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json")
        )
    return model, tokenizer

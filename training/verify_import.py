"""`import ... --verify`: the imported checkpoint against transformers on a few sentences.

Marian: source ids equal MarianTokenizer's, logits (teacher-forced on transformers' greedy output) and greedy
tokens (generate(num_beams=1), <pad> banned as OPUS-MT's generation config does) for each served target.
XLM-R: input ids equal XLMRobertaTokenizer's and class probabilities in one padded batch. It prints the
largest difference; True when within TOLERANCE and every token equal (or transformers is not installed: it
says so). transformers is imported only here.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from model.checkpoint import LoadedModel, load_checkpoint
from model.decoding import DecodeOptions
from model.inference import classify_ids, translate_ids
from model.preprocess import classifier_ids, pad_ids, source_ids

TOLERANCE = 1e-3  # float32 logits; observed: ~1e-6 (docs/pretrained.md)
LIMIT = 32  # generated tokens, EOS included


def sample_texts(sp_model: Path, n: int = 8, seed: int = 0) -> list[str]:
    """n pseudo-sentences of 3..12 random pieces of the source sentencepiece model (any language)."""
    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    pieces = [
        i for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))
    ]
    g = random.Random(seed)
    return [sp.decode([g.choice(pieces) for _ in range(g.randint(3, 12))]).strip() or "a" for _ in range(n)]


def verify(family: str, folder: Path, checkpoint: Path, texts: list[str] | None) -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("verify: transformers is not installed (pip install transformers): not compared")  # noqa: T201
        return True  # the checkpoint passed the loader's check; the comparison is optional
    loaded = load_checkpoint(checkpoint)
    if family == "marian":
        return verify_marian(folder, loaded, texts or sample_texts(folder / "source.spm"))
    return verify_xlmr(folder, loaded, texts or sample_texts(folder / "sentencepiece.bpe.model"))


def _report(what: str, diff: float, equal: int, total: int, tokens: str) -> bool:
    ok = diff <= TOLERANCE and equal == total
    print(  # noqa: T201
        f"verify: {what}: largest difference {diff:.2e} (tolerance {TOLERANCE:g}); {tokens} {equal}/{total} "
        f"equal: {'OK' if ok else 'DIFFERENT'}"
    )
    return ok


def verify_marian(folder: Path, loaded: LoadedModel, texts: list[str]) -> bool:
    from transformers import MarianMTModel, MarianTokenizer

    model: Any = MarianMTModel.from_pretrained(folder).eval()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        tok = MarianTokenizer(
            str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json")
        )
    cfg, ours, ok = loaded.config, loaded.model, True
    pieces = loaded.tokenizer.pieces  # type: ignore[union-attr]
    for lang in cfg.target_langs if cfg.target_lang_ids else cfg.target_langs[:1]:
        prefix = cfg.source_prefix(lang)
        tag = f"{pieces(prefix)[0]} " if prefix else ""
        seqs = [source_ids(loaded.tokenizer, t, cfg) for t in texts]  # type: ignore[arg-type]
        theirs_src = tok([tag + t for t in texts])["input_ids"]
        same_src = sum(prefix + s == t for s, t in zip(seqs, theirs_src, strict=True))
        src = pad_ids([prefix + s for s in seqs], cfg.pad_id)
        mask = (src != cfg.pad_id).long()
        with torch.inference_mode():
            out = model.generate(
                input_ids=src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=LIMIT,
                bad_words_ids=[[cfg.pad_id]],
            )  # fmt: skip
            want = model(input_ids=src, attention_mask=mask, decoder_input_ids=out).logits
            got = ours(src, out)  # type: ignore[operator]
        hyps = translate_ids(ours, seqs, DecodeOptions(1, LIMIT, 0.0, LIMIT, 0.0, 1), target_lang=lang)  # type: ignore[arg-type]
        same = sum(
            h[0].tokens + [cfg.eos_id] == [t for t in row[1:] if t != cfg.pad_id]
            for h, row in zip(hyps, out.tolist(), strict=True)
        )
        diff = float((got - want).abs().max())
        what = f"{len(texts)} sentences -> {lang}; source ids {same_src}/{len(texts)} equal; logits"
        ok &= _report(what, diff, same, len(texts), "greedy outputs") and same_src == len(texts)
    return ok


def verify_xlmr(folder: Path, loaded: LoadedModel, texts: list[str]) -> bool:
    from transformers import XLMRobertaForSequenceClassification, XLMRobertaTokenizer

    model: Any = XLMRobertaForSequenceClassification.from_pretrained(folder).eval()
    tok = XLMRobertaTokenizer(str(folder / "sentencepiece.bpe.model"))
    cfg = loaded.config
    seqs = [classifier_ids(loaded.tokenizer, t, cfg) for t in texts]  # type: ignore[arg-type]
    theirs_ids = tok(texts, truncation=True, max_length=cfg.max_len)["input_ids"]
    same_ids = sum(s == t for s, t in zip(seqs, theirs_ids, strict=True))
    ids = pad_ids(seqs, cfg.pad_id)
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=(ids != cfg.pad_id).long()).logits.softmax(-1)
    got = classify_ids(loaded.model, seqs)  # type: ignore[arg-type]
    same = int((got.argmax(-1) == want.argmax(-1)).sum())
    diff = float((got - want).abs().max())
    what = f"{len(texts)} texts; input ids {same_ids}/{len(texts)} equal; probabilities"
    return _report(what, diff, same, len(texts), "labels") and same_ids == len(texts)

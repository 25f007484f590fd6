"""Write random-init checkpoints (sentiment-en, sentiment-ko, translate-fr-en) to try the server and the bench.

  python bench/make_tiny_checkpoints.py /tmp/tiny-checkpoints [--d-model 64 --layers 2]

A near-zero model that tokenizes like sentiment-en (what the request path alone costs, see BENCHMARKS.md):

  python bench/make_tiny_checkpoints.py /tmp/zero --d-model 16 --layers 1 --heads 1 \
      --tokenizer checkpoints/sentiment-en/tokenizer.model

The weights are random (labels and translations are junk) but deterministic; the tokenizer is a real
sentencepiece model trained on a few hundred synthetic sentences.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from pathlib import Path

import sentencepiece as spm
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model import ModelConfig, SentimentClassifier, Translator, save_checkpoint  # noqa: E402

WORDS = {
    "en": "the cat dog friend teacher movie story team likes sees wants finds house book river music good bad "
    "very much today again slowly with joy boring wonderful terrible acting plot",
    "fr": "le chat chien ami maîtresse film histoire équipe aime voit veut trouve maison livre rivière musique "
    "bon mauvais beaucoup aujourd'hui encore lentement avec joie ennuyeux merveilleux",
    "ko": "이 영화 배우 연기 스토리 음악 결말 드라마 감독 정말 좋았어요 너무 재미없어요 최고입니다 별로였다 감동적이에요 지루했어요",
}


def corpus(n: int = 600, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocab = {lang: words.split() for lang, words in WORDS.items()}
    lines = []
    for _ in range(n):
        for words in vocab.values():
            lines.append(
                " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + rng.choice([".", "!", "?"])
            )
    return lines


def train_tokenizer(root: Path, vocab_size: int) -> Path:
    text = root / "corpus.txt"
    text.write_text("\n".join(corpus()) + "\n", encoding="utf-8")
    prefix = root / "tokenizer"
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(prefix), model_type="unigram", vocab_size=vocab_size,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, character_coverage=1.0, hard_vocab_limit=False,
        num_threads=1, minloglevel=2,
    )  # fmt: skip
    text.unlink()
    return prefix.with_suffix(".model")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab-size", type=int, default=300)
    p.add_argument(
        "--tokenizer", type=Path, help="use this sentencepiece model (e.g. a shipped checkpoint's) instead of "
        "training a toy one: the bench's inputs then cost what they cost the shipped model to tokenize",
    )  # fmt: skip
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tokenizer is not None:
        tok = args.out / "tokenizer.model"
        shutil.copyfile(args.tokenizer, tok)
    else:
        tok = train_tokenizer(args.out, args.vocab_size)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(tok.read_bytes())
    common = {
        "vocab_size": sp.get_piece_size(), "d_model": args.d_model, "n_heads": args.heads,
        "n_layers": args.layers, "d_ff": 4 * args.d_model, "dropout": 0.0, "max_len": 256,
    }  # fmt: skip
    for i, name in enumerate(("sentiment-en", "sentiment-ko")):
        torch.manual_seed(i)
        cfg = ModelConfig(task="sentiment", labels=("negative", "positive"), **common)  # type: ignore[arg-type]
        save_checkpoint(
            args.out / name, SentimentClassifier(cfg).eval(), tok, dtype=torch.float32, metrics={}
        )
    torch.manual_seed(2)
    cfg = ModelConfig(
        task="translation", n_decoder_layers=args.layers, source_langs=("fr",), target_langs=("en",),
        tie_embeddings=False, **common,  # type: ignore[arg-type]
    )  # fmt: skip
    save_checkpoint(
        args.out / "translate-fr-en", Translator(cfg).eval(), tok, dtype=torch.float32, metrics={}
    )
    tok.unlink()  # each checkpoint has its copy
    tok.with_suffix(".vocab").unlink(missing_ok=True)
    print(f"wrote sentiment-en, sentiment-ko, translate-fr-en to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write random-init checkpoints (sentiment-en, sentiment-ko, translate-fr-en) to try the server and the bench.

  python bench/make_tiny_checkpoints.py /tmp/tiny-checkpoints [--d-model 64 --layers 2]

A near-zero model that tokenizes like sentiment-en (what the request path alone costs, see BENCHMARKS.md):

  python bench/make_tiny_checkpoints.py /tmp/zero --d-model 16 --layers 1 --heads 1 \
      --tokenizer checkpoints/sentiment-en/tokenizer.model

The weights are random (labels and translations are junk) but deterministic; the tokenizer is a real
sentencepiece model trained on a few hundred synthetic sentences (bench/tiny.py, the tests' builder too).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tiny import piece_count, tiny_sentiment_config, tiny_translation_config, train_tokenizer  # noqa: E402
from model import SentimentClassifier, Translator, save_checkpoint  # noqa: E402


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
        tok = train_tokenizer(args.out, args.vocab_size, name="tokenizer")
    vocab_size = piece_count(tok)
    size = {"d_model": args.d_model, "n_heads": args.heads, "n_layers": args.layers, "d_ff": 4 * args.d_model}
    for i, name in enumerate(("sentiment-en", "sentiment-ko")):
        torch.manual_seed(i)
        cfg = tiny_sentiment_config(vocab_size, max_len=256, **size)
        save_checkpoint(
            args.out / name, SentimentClassifier(cfg).eval(), tok, dtype=torch.float32, metrics={}
        )
    torch.manual_seed(2)
    cfg = tiny_translation_config(
        vocab_size, max_len=256, n_decoder_layers=args.layers, tie_embeddings=False, **size
    )
    save_checkpoint(
        args.out / "translate-fr-en", Translator(cfg).eval(), tok, dtype=torch.float32, metrics={}
    )
    tok.unlink()  # each checkpoint has its copy
    tok.with_suffix(".vocab").unlink(missing_ok=True)
    print(f"wrote sentiment-en, sentiment-ko, translate-fr-en to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

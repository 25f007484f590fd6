"""`python -m training import FAMILY DIR --name NAME`: a published model as a checkpoint of ours, checked.

  python -m training import marian DIR --name opus-mt-fr-en [--source-lang fr --target-lang en] [--verify]
  python -m training import xlm-roberta DIR --name sentiment-xlmr --lang en fr de [--verify]

The checkpoint is written beside its final place, loaded back with the server's own loader
(model.checkpoint.load_checkpoint) and run through one forward pass; only then is it moved into place.
Anything the server would refuse fails the import instead: exit 1 and one line saying why, nothing written.
--verify then compares it with transformers (when installed) on a few sentences and prints the largest
difference (training.verify_import).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from training.import_check import checkpoint_path, one_line, write_checked

FAMILIES = ("marian", "xlm-roberta")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training import",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "family", choices=FAMILIES, help="marian: OPUS-MT; xlm-roberta: XLMRobertaForSequenceClassification"
    )
    p.add_argument(
        "dir",
        type=Path,
        help="the downloaded model folder (model.safetensors, or pytorch_model.bin read with "
        "torch.load(weights_only=True): never unpickled)",
    )
    p.add_argument("--name", required=True, help="the checkpoint (and served model) name")
    p.add_argument("--out-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--source-lang", nargs="+", help="marian; default: SRC of an opus-mt name")
    p.add_argument(
        "--target-lang", nargs="+", help="marian; default: TGT of an opus-mt name, else the >>xxx<< tokens"
    )
    p.add_argument("--lang", nargs="+", help="xlm-roberta: the languages it classifies (routing by language)")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="stored weights")
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint of that name")
    p.add_argument("--verify", action="store_true", help="compare with transformers (when installed)")
    p.add_argument("--verify-texts", type=Path, help="--verify on these sentences (one a line)")
    return p


def run(args: argparse.Namespace) -> Path:
    out, dtype = checkpoint_path(args.out_dir, args.name), getattr(torch, args.dtype)
    if args.family == "marian":
        from training.import_marian import import_marian

        def write(stage: Path) -> Path:
            return import_marian(args.dir, stage, args.source_lang, args.target_lang, dtype)
    else:
        from training.import_xlmr import import_xlmr

        def write(stage: Path) -> Path:
            return import_xlmr(args.dir, stage, args.lang, dtype)

    return write_checked(out, write, args.force)


def cli(argv: list[str] | None = None) -> int:
    """Exit 0 written (and verified, with --verify), 1 refused or not equal: one line on stderr saying why."""
    args = parser().parse_args(argv)
    try:
        path = run(args)
    except Exception as e:  # any refusal (a pickle refused, a truncated file, a wrong type): one line
        print(f"error: import {args.family} {args.dir}: {one_line(e)}", file=sys.stderr)  # noqa: T201
        return 1
    print(f"wrote {path} (loaded back and run once as the server does)")  # noqa: T201
    if args.verify:
        from training.verify_import import verify

        texts = args.verify_texts.read_text().splitlines() if args.verify_texts else None
        return 0 if verify(args.family, args.dir, path, texts) else 1
    return 0

"""Export a translator checkpoint to a CTranslate2 model directory, so it runs in CTranslate2-based stacks.

  python -m training export --format ctranslate2 --checkpoint checkpoints/translate-fr-en --out DIR [--force]

The converter is engines/ct2_convert.py (the server's CTranslate2 engine uses it too); the directory's files
are described there. `ctranslate2_options` (engines/ct2_decode.py) maps our `DecodeOptions` to `translate_batch`
options; with them CTranslate2 float32 returns the tokens our decoder returns (`translate_ids_ctranslate2`).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from engines.ct2_convert import INSTALL_HINT, ctranslate2_spec, export_ctranslate2
from engines.ct2_decode import NO_EARLY_EXIT, ctranslate2_options, translate_ids_ctranslate2

__all__ = [  # the converter's names, where the export CLI's users find them
    "FORMATS",
    "NO_EARLY_EXIT",
    "cli",
    "ctranslate2_options",
    "ctranslate2_spec",
    "export_ctranslate2",
    "translate_ids_ctranslate2",
]

FORMATS = ("ctranslate2",)


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--format", choices=FORMATS, required=True)
    p.add_argument("--checkpoint", type=Path, required=True, help="translator checkpoint directory")
    p.add_argument("--out", type=Path, required=True, help="output model directory")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args(argv)
    if importlib.util.find_spec("ctranslate2") is None:
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        out = export_ctranslate2(args.checkpoint, args.out, args.force)
    except (FileExistsError, ValueError) as e:  # CheckpointError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0

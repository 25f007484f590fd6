"""CLI: python -m training COMMAND [--key value | --key=value ...]  (COMMAND --help for its options)

python -m training reproduce sentiment-ko --dry-run       # a shipped model's recipe (training/recipes.py)
python -m training translate --preset translate-fr-en --epochs 20
python -m training sentiment --dataset imdb --d-model 128 --dry-run
python -m training ngram-head --run runs/sentiment-en --spec w3c4
python -m training calibrate --checkpoint runs/sentiment-en/best
python -m training evaluate --checkpoint DIR --data FILE --format tatoeba
python -m training ship --run runs/translate-fr-en --name translate-fr-en
python -m training card --checkpoint checkpoints/translate-fr-en
python -m training download nsmc --data-dir DIR
python -m training export --format ctranslate2 --checkpoint checkpoints/translate-fr-en --out DIR
python -m training import marian DIR --name opus-mt-fr-en     # an OPUS-MT download (docs/pretrained.md)
python -m training import xlm-roberta DIR --name sentiment-xlmr --lang en   # a sentiment classifier
python -m training pull Helsinki-NLP/opus-mt-fr-en[@REVISION]     # download + import (docs/pretrained.md)
python -m training pull argos:fr-en [--progress json]      # an Argos Translate package (docs/pretrained.md)
"""

from __future__ import annotations

import gc
import importlib
import logging
import sys

USAGE = __doc__ or ""
# command -> "module:function"; the function takes the remaining argv and returns the exit code. A new
# subcommand is one line here (modules are imported only when their command runs).
COMMANDS: dict[str, str] = {
    "sentiment": "training.train:sentiment_cli",
    "translate": "training.train:translate_cli",
    "ngram-head": "training.ngram_head:cli",
    "calibrate": "training.calibrate:cli",
    "evaluate": "training.evaluate:cli",
    "download": "training.download:cli",
    "ship": "training.ship:cli",
    "card": "training.ship:card_cli",
    "reproduce": "training.recipes:cli",
    "export": "training.export:cli",
    "import": "training.imports:cli",
    "pull": "training.pull:cli",
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, function = COMMANDS[command].split(":")
    return getattr(importlib.import_module(module), function)(rest)


if __name__ == "__main__":
    code = main()
    # what is left (torch's modules and objects) is the OS's to free: the interpreter's last collections at
    # exit would walk all of it, on every torchrun rank too
    gc.freeze()
    sys.exit(code)

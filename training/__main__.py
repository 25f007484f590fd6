"""CLI: python -m training {sentiment,translate,ngram-head,evaluate,download,ship,export} ...

python -m training translate --preset=translate-fr-en [--field=value ...]
python -m training sentiment --dataset=imdb --d_model=128 --dry_run=true
python -m training ngram-head --run runs/sentiment-en --spec w3c4
python -m training evaluate --checkpoint DIR --data FILE --format tatoeba
python -m training download nsmc --data-dir DIR
python -m training export --format ctranslate2 --checkpoint checkpoints/translate-fr-en --out DIR
"""

from __future__ import annotations

import logging
import sys

USAGE = __doc__ or ""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = args[0], args[1:]
    if command in ("sentiment", "translate"):
        from training.config import parse_overrides
        from training.train import train

        if any(a in ("-h", "--help") for a in rest):
            from training.config import PRESETS, TrainConfig

            print(f"python -m training {command} --preset=NAME --field=value ...\npresets: {sorted(PRESETS)}")
            print("fields:", ", ".join(f.name for f in TrainConfig.__dataclass_fields__.values()))
            return 0
        task = "sentiment" if command == "sentiment" else "translation"
        try:
            cfg = parse_overrides(rest, {"task": task})
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if cfg.task != task:
            print(f"error: preset/config is a {cfg.task} run, not {task}", file=sys.stderr)
            return 2
        best = train(cfg)
        print(best)
        return 0
    if command == "evaluate":
        from training.evaluate import cli as evaluate_cli

        return evaluate_cli(rest)
    if command == "download":
        from training.download import cli as download_cli

        return download_cli(rest)
    if command == "ngram-head":
        from training.wide import cli as wide_cli

        return wide_cli(rest)
    if command == "export":
        from training.export import cli as export_cli

        return export_cli(rest)
    if command == "ship":
        from training.ship import cli as ship_cli

        return ship_cli(rest)
    print(f"error: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

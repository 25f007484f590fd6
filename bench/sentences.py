"""Sentence splitters on the test corpus of /translate (tests/app/data/sentence_splits.json): cases passing,
time per text, installed size.

  python -m bench.sentences [--candidates regex,sentencex,pysbd,syntok,blingfire] [--failures]

The corpus: abbreviations, ordinals, decimals, dates, ellipses, quotes, ?!, initials and URLs in de, fr, es and
a few en, each with its expected sentences. "regex" is the splitter /translate had before (a break after any
.!?… and whitespace). A candidate that is not installed is skipped. Time: one thread, the median of 5 runs over
the corpus, per text.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "app" / "data" / "sentence_splits.json"
Splitter = Callable[[str, str], list[str]]  # (language, one line of text) -> sentences


def _regex() -> Splitter:
    end = re.compile(r"(?<=[.!?…])\s+")
    return lambda lang, text: [s for s in end.split(text.strip()) if s]


def _served() -> Splitter:
    from app.text.sentences import split_line

    return split_line


def _sentencex() -> Splitter:
    from sentencex import segment

    return lambda lang, text: [s.strip() for s in segment(lang, text) if s.strip()]


def _pysbd() -> Splitter:
    import pysbd

    segmenters: dict[str, pysbd.Segmenter] = {}

    def split(lang: str, text: str) -> list[str]:
        if lang not in segmenters:
            segmenters[lang] = pysbd.Segmenter(language=lang, clean=False)
        return [s.strip() for s in segmenters[lang].segment(text) if s.strip()]

    return split


def _syntok() -> Splitter:
    from syntok import segmenter

    def split(lang: str, text: str) -> list[str]:
        return [
            "".join(t.spacing + t.value for t in sentence).strip()
            for paragraph in segmenter.process(text)
            for sentence in paragraph
        ]

    return split


def _blingfire() -> Splitter:
    import blingfire

    return lambda lang, text: [s for s in blingfire.text_to_sentences(text).split("\n") if s]


CANDIDATES: dict[str, tuple[str | None, Callable[[], Splitter]]] = {
    "regex": (None, _regex),
    "served": (None, _served),  # app.text.sentences, as /translate runs it
    "sentencex": ("sentencex", _sentencex),
    "pysbd": ("pysbd", _pysbd),
    "syntok": ("syntok", _syntok),
    "blingfire": ("blingfire", _blingfire),
}


def installed_mb(dist: str | None) -> str:
    if dist is None:
        return "–"
    d = md.distribution(dist)
    paths = (Path(str(d.locate_file(f))) for f in d.files or [])
    return f"{sum(p.stat().st_size for p in paths if p.is_file()) / 1e6:.1f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--failures", action="store_true", help="print each failed case")
    args = ap.parse_args(argv)
    cases = json.loads(CORPUS.read_text())["cases"]
    langs = sorted({c["lang"] for c in cases})
    counts = {lang: sum(c["lang"] == lang for c in cases) for lang in langs}
    print(f"{len(cases)} cases ({', '.join(f'{lang} {n}' for lang, n in counts.items())})")
    print("| splitter | " + " | ".join(langs) + " | passed | µs/text | installed MB |")
    print("|---|" + "---:|" * (len(langs) + 3))
    for name in args.candidates.split(","):
        dist, factory = CANDIDATES[name]
        try:
            split = factory()
        except ImportError as e:
            print(f"| {name} | not installed ({e.name}) |")
            continue
        ok = dict.fromkeys(langs, 0)
        for c in cases:
            got = split(c["lang"], c["text"])
            if got == c["sentences"]:
                ok[c["lang"]] += 1
            elif args.failures:
                print(f"  {name} {c['lang']}: {got}")
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for c in cases:
                split(c["lang"], c["text"])
            runs.append((time.perf_counter() - start) / len(cases) * 1e6)
        per_lang = " | ".join(f"{ok[lang]}/{counts[lang]}" for lang in langs)
        total = sum(ok.values())
        print(
            f"| {name} | {per_lang} | {total}/{len(cases)} | {statistics.median(runs):.0f} | {installed_mb(dist)} |"
        )


if __name__ == "__main__":
    main()

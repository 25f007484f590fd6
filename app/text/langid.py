"""Language identification among the served languages: py3langid (langid.py's naive Bayes model over byte
n-grams, 97 languages, bundled in its wheel: nothing is downloaded). Chosen by measurement (bench/langid.py,
BENCHMARKS.md): the best accuracy on the served languages' test splits, short texts included, and fast enough
to run a few short texts on the event loop.

The model ranks its languages; `restrict` keeps the served ones, renormalised. A text that the model puts in
another language with probability >= FLAG_UNSERVED (Italian, Japanese, ...) comes back with that language first,
so a caller can answer "detected it, it is not served" instead of guessing among the served ones.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

FLAG_UNSERVED = 0.9  # min probability of an unserved language to report it (served short texts stay served)
MAX_CHARS = 500  # the model reads this many characters of a text (its cost is linear in the length)


@dataclass(frozen=True)
class Detection:
    language: str  # ISO 639-1
    confidence: float  # 0..1


def restrict(
    ranking: Iterable[tuple[str, float]], languages: Collection[str], flag_unserved: bool = False
) -> list[Detection]:
    """Detections among `languages`, renormalised, best first; with flag_unserved, a ranking whose best is
    another language at >= FLAG_UNSERVED puts that language first (with its own probability)."""
    ranking = sorted(ranking, key=lambda lp: -lp[1])
    kept = [(lang, p) for lang, p in ranking if lang in languages]
    total = sum(p for _, p in kept)
    out = [Detection(lang, p / total if total > 0 else 0.0) for lang, p in kept]
    if flag_unserved and ranking and ranking[0][0] not in languages and ranking[0][1] >= FLAG_UNSERVED:
        out.insert(0, Detection(ranking[0][0], min(1.0, ranking[0][1])))  # float32 sums may round above 1
    return out


class Py3LangidRanker:
    """text -> [(ISO 639-1, probability)] over py3langid's 97 languages, best first (its bundled model)."""

    def __init__(self) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        # norm_probs: a softmax over all languages (so restricting them is renormalising, see restrict)
        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.labels = frozenset(self._identifier.labels)

    def __call__(self, text: str) -> list[tuple[str, float]]:
        return [(lang, float(p)) for lang, p in self._identifier.rank(text[:MAX_CHARS])]


class LanguageDetector:
    """Ranks the given languages for a text; the first detection may be an unserved language (see module)."""

    def __init__(self, languages: Collection[str]) -> None:
        if not languages:
            raise ValueError("LanguageDetector needs at least one language")
        self.languages = frozenset(languages)
        self._rank = Py3LangidRanker()
        if unknown := sorted(self.languages - self._rank.labels):
            log.warning(
                "language identification cannot detect %s: no text is detected as them", ", ".join(unknown)
            )

    def detect(self, text: str) -> list[Detection]:
        """Best first; empty for a text with nothing to go on (no letters at all)."""
        if not any(c.isalpha() for c in text):
            return []
        return restrict(self._rank(text), self.languages, flag_unserved=True)

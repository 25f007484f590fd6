"""Which classifier answers a text: the request's "model", else the one for the text's language (any Hangul
character: Korean, else English: the two we ship), the canonical sentiment-LANG first, else the first by
name. The table is the registry's view (Registry.view): rebuilt when a model comes, goes or fails."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from app.core.errors import NotFound

if TYPE_CHECKING:
    from app.registry import ModelEntry, Registry

TASK = "sentiment"  # the configs' task of a classifier
HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff]")


def text_language(text: str) -> str:
    """'ko' when the text has any Hangul character, else 'en'."""
    return "ko" if HANGUL.search(text) else "en"


def by_language(entries: list[ModelEntry]) -> dict[str, str]:
    """Text language -> its classifier."""
    by_lang: dict[str, str] = {}
    for e in sorted(entries, key=lambda e: e.name):
        if e.task == TASK:
            for lang in e.languages:
                if by_lang.get(lang) != f"sentiment-{lang}":
                    by_lang[lang] = e.name
    return by_lang


def sentiment_routes(registry: Registry) -> SentimentRoutes:
    """The routing table of the registry as it is now (built once per change of it)."""
    return registry.view(TASK, lambda: SentimentRoutes(registry))


class SentimentRoutes:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.by_lang = by_language(registry.routable())

    def sentiment_for(self, text: str, requested: str | None) -> str:
        """The requested model, or the default for the text's language."""
        registry = self.registry
        if requested is not None:
            return registry.get(requested, TASK).name
        lang = text_language(text)
        name = self.by_lang.get(lang)
        if name is None:
            loaded = ", ".join(registry.names(TASK)) or "none"
            raise NotFound(
                f"model: no sentiment model for language {lang!r} (expected sentiment-{lang}); "
                f'loaded sentiment models: {loaded}; pass "model" to choose one'
            )
        return registry.check_loaded(name)

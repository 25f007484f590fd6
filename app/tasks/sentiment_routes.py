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
    """The routing table of the registry as it is now (built once per change of it: Registry.view's cache,
    read here without a call, as every request reads it)."""
    got = registry.views.get(TASK)
    if got is None or got[0] != registry.generation:
        got = registry.views[TASK] = (registry.generation, SentimentRoutes(registry))
    return got[1]  # type: ignore[no-any-return]


def models_for(registry: Registry, texts: list[str], requested: str | None) -> list[str]:
    """Each text's model (SentimentRoutes.models_for), in one call from the task."""
    return sentiment_routes(registry).models_for(texts, requested)


class SentimentRoutes:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.by_lang = by_language(registry.routable())

    def models_for(self, texts: list[str], requested: str | None) -> list[str]:
        """Each text's model: the requested one, or the default for its language; 404 for a language
        without one, 503 for a model that failed to load."""
        registry = self.registry
        if requested is not None:
            return [registry.get(requested, TASK).name] * len(texts)
        models = []
        for text in texts:
            lang = text_language(text)
            name = self.by_lang.get(lang)
            if name is None:
                loaded = ", ".join(registry.names(TASK)) or "none"
                raise NotFound(
                    f"model: no sentiment model for language {lang!r} (expected sentiment-{lang}); "
                    f'loaded sentiment models: {loaded}; pass "model" to choose one'
                )
            models.append(name)
        if registry.failed:  # the routes keep a failed model's texts (APP_STRICT_READINESS): 503 saying why
            for name in set(models):
                registry.check_loaded(name)
        return models

"""The request limits from settings, checked before any work is queued: 422 naming the field, the limit (and
the setting that sets it) and the value."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.core.errors import invalid
from app.core.settings import Settings


class Limits:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def check_texts(self, texts: Sequence[str], field: str, max_texts: int | None = None) -> None:
        """At most APP_MAX_TEXTS texts (or `max_texts`), each of at most APP_MAX_CHARS characters."""
        s = self.settings
        if len(texts) > (limit := max_texts or s.max_texts):
            raise invalid((field,), f"at most {limit} texts per request (got {len(texts)})", "too_long")
        for i, text in enumerate(texts):
            if len(text) > s.max_chars:
                loc = (field,) if field != "texts" else (field, i)
                raise invalid(loc, f"at most {s.max_chars} characters per text (got {len(text)})", "too_long")

    def check_glossary(self, glossary: dict[str, str] | None, field: str = "glossary") -> None:
        """At most APP_MAX_GLOSSARY_TERMS terms, each (source and target) of at most APP_MAX_TERM_CHARS
        characters (`field`: what a 422 names)."""
        s = self.settings
        if not glossary:
            return
        if len(glossary) > s.max_glossary_terms:
            raise invalid(
                (field,),
                f"at most {s.max_glossary_terms} terms per glossary (APP_MAX_GLOSSARY_TERMS), got {len(glossary)}",
                "too_long",
            )
        for source, target in glossary.items():
            if (n := max(len(source), len(target))) > s.max_term_chars:
                raise invalid(
                    (field, source[:40]),
                    f"at most {s.max_term_chars} characters per term (APP_MAX_TERM_CHARS), got {n}",
                    "too_long",
                )

    def check_work(self, work: int, field: str, at_least: str = "") -> None:
        """422 naming APP_MAX_WORK when a request costs more work units than it allows."""
        if work > self.settings.max_work:
            raise invalid(
                (field,),
                f"this request costs {at_least}{work:,} work units, more than APP_MAX_WORK "
                f"({self.settings.max_work:,}); a translated sentence costs its source tokens + beam_size x "
                "its output length limit: send fewer texts or sentences, or a smaller beam_size or max_length",
                "too_long",
            )

    def check_jobs(self, work: int, queues: Iterable[tuple[int, int]], field: str) -> None:
        """Before queuing: 422 when the request's work exceeds APP_MAX_WORK, or when it makes more items for
        one model than the model's queue holds (`queues`: per model, its items and the queue's max_items), a
        429 that could never clear."""
        self.check_work(work, field)
        for items, max_items in queues:
            if items > max_items:
                raise invalid(
                    (field,),
                    f"this request makes {items} items (texts or sentences) for one model, more than its "
                    f"queue holds ({max_items}, APP_MAX_QUEUE)",
                    "too_long",
                )

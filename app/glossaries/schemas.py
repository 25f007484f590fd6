"""The bodies of /glossaries: a glossary to store, and what the store answers (DeepL's fields)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from app.schemas import GLOSSARY_SCHEMA, Str, Term, distinct_terms

# a language code (ISO 639 and subtags: fr, pt-BR, zh-Hans); never "auto": a stored glossary has one source
Code = Annotated[str, Field(min_length=2, max_length=12, pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")]
Entries = Annotated[
    dict[Term, Term], Field(min_length=1), WithJsonSchema(GLOSSARY_SCHEMA | {"minProperties": 1})
]


class GlossaryCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "furniture",
                    "source_lang": "fr",
                    "target_lang": "en",
                    "entries": {"canapé": "couch"},
                }
            ]
        },
    )

    name: Str = Field(min_length=1, max_length=100, description="A name for people; not unique.")
    source_lang: Code = Field(description="The language of the source terms (a code, not auto).")
    target_lang: Code
    entries: Entries = Field(
        description='{"source term": "target term"}, as /translate\'s glossary: at most APP_MAX_GLOSSARY_TERMS '
        "terms of at most APP_MAX_TERM_CHARS characters, the source terms distinct ignoring case."
    )

    _distinct_terms = field_validator("entries")(distinct_terms)


class GlossaryInfo(BaseModel):
    glossary_id: str
    name: str
    source_lang: str = Field(description="Lowercase, as every code the glossary is compared with.")
    target_lang: str
    entry_count: int
    creation_time: str = Field(description="ISO 8601, UTC (e.g. 2026-01-31T12:00:00Z).")


class GlossaryList(BaseModel):
    glossaries: list[GlossaryInfo] = Field(description="This API key's glossaries, oldest first.")


class GlossaryEntries(BaseModel):
    entries: dict[str, str]


def form_terms(text: str | None) -> dict[str, Any] | None:
    """A form's `glossary` field: the JSON object its text encodes (blank: None); ValueError otherwise. Its
    terms are checked where a TranslateRequest takes them."""
    if text is None or not text.strip():
        return None
    try:
        terms = json.loads(text)
    except ValueError as e:
        raise ValueError(f"is not a JSON object ({e})") from None
    if not isinstance(terms, dict):
        raise ValueError(f"is not a JSON object (got {type(terms).__name__})")
    return terms

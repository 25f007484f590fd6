"""A file translated in one call of the translation task (the call POST /translate makes): its texts batched
with every other request's, priced in work units (APP_MAX_WORK: 422), answered in APP_REQUEST_TIMEOUT_S.

A text longer than APP_MAX_CHARS (a long paragraph) is sent as pieces of whole sentences within it (a longer
sentence: pieces of whole words) and its translation joined back, so what limits a file is its size
(APP_MAX_FILE_BYTES) and its work, as LibreTranslate does not apply its character limit to files; a file of
more pieces than the schema's cap (MAX_TEXTS) is refused (422).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import ValidationError

from app.batching.wait import Disconnected
from app.core.errors import invalid
from app.files.document import Format
from app.schemas import AUTO, MAX_TEXTS, TranslateRequest, TranslateResponse
from app.serving.protocol import Serving
from app.tasks.translation import TranslationTask
from app.tasks.translation_routes import translation_routes
from app.text.sentences import split_sentences

FIELD = "file"  # what a 422 names


async def translate_file(
    service: Serving,
    fmt: Format,
    data: bytes,
    source: str,
    target: str,
    disconnected: Disconnected = None,
    glossary: dict[str, str] | None = None,
    glossary_id: str | None = None,
) -> bytes:
    """The file `data` (of format `fmt`) translated from `source` (a code, or "auto": the language of the
    file's text as a whole, as LibreTranslate detects it) to `target`, with a glossary (its terms, or a stored
    one's id: its source_lang must be the file's, detected or given).

    Raises:
        UnreadableFile: the bytes are not `fmt`.
        RequestValidationError: a limit, at "file" (APP_MAX_WORK, APP_MAX_QUEUE, MAX_TEXTS pieces, a
            sentence over its model's token limit); 422.
        ServiceError: no model for the pair (404), queue full (429), not ready (503), past the deadline (504).
    """
    # parsing and writing a file take a while (a few MB of XML): off the event loop, as other requests wait
    doc = await asyncio.to_thread(fmt.open, data)
    if not doc.texts:  # nothing to translate: the file as the format writes it
        return await asyncio.to_thread(doc.render, [], (source, target))
    if source == AUTO:
        source = await _detect(service, doc.texts, target)
    max_chars = service.settings.max_chars
    pieces, owner = [], []  # what is sent, and the text each piece is part of
    for i, text in enumerate(doc.texts):
        for piece in _pieces(text, source, max_chars):
            pieces.append(piece)
            owner.append(i)
    if len(pieces) > MAX_TEXTS:
        raise invalid(
            (FIELD,),
            f"at most {MAX_TEXTS} texts (paragraphs, lines, pieces of longer ones) per file, the most one "
            f"translation request holds; got {len(pieces)}",
            "too_long",
        )
    try:
        req = TranslateRequest(
            texts=pieces, source_lang=source, target_lang=target, glossary=glossary, glossary_id=glossary_id
        )
    # a code that is not one, a glossary's term, or a text no model reads (the file's: at "file")
    except ValidationError as e:
        err = e.errors()[0]
        loc = (FIELD,) if err["loc"][:1] == ("texts",) else err["loc"]
        raise invalid(loc, str(err["msg"])) from None
    answer: TranslateResponse = await service.answer(
        TranslationTask.name, req, disconnected, max_texts=len(pieces), field=FIELD
    )
    joined: list[list[str]] = [[] for _ in doc.texts]
    for i, result in zip(owner, answer.results, strict=True):
        joined[i].append(result.translation)
    return await asyncio.to_thread(doc.render, [" ".join(parts) for parts in joined], (source, target))


async def _detect(service: Serving, texts: Sequence[str], target: str) -> str:
    """The language of the file's text (its first APP_MAX_CHARS characters; the detector reads fewer), or
    `target` when it has none the detector can tell (the texts then pass through); a 422 at "file" naming
    it and the served sources when no model translates it into `target`, as /translate's "auto"."""
    sample = " ".join(texts)[: service.settings.max_chars]
    found = (await service.detect([sample], FIELD))[0]
    if not found or found[0].language == target:
        return target
    assert service.registry is not None  # the service has detected: it has started
    translation_routes(service.settings, service.registry).auto_translator(found, target, None, (FIELD,))
    return found[0].language


def _pieces(text: str, lang: str, max_chars: int) -> list[str]:
    """`text` as pieces of at most max_chars: whole sentences packed together; a longer sentence as whole
    words packed together (a longer word cut)."""
    if len(text) <= max_chars:
        return [text]
    units = [s for line in split_sentences(text, lang) for s in line]
    if any(len(u) > max_chars for u in units):
        words = [w for u in units for w in (u.split() if len(u) > max_chars else [u])]
        units = [w[i : i + max_chars] for w in words for i in range(0, len(w), max_chars)]
    pieces: list[str] = []
    for unit in units:
        if pieces and len(pieces[-1]) + 1 + len(unit) <= max_chars:
            pieces[-1] += " " + unit
        else:
            pieces.append(unit)
    return pieces

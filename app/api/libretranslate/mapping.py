"""The LibreTranslate API mapped onto the service: its request fields and limits, its answers and errors.

A translation is one call of the translation task (a TranslateRequest, like POST /translate), so LibreTranslate
clients share the batchers with native clients and with each other. HTML: the text blocks of every document
of a request go in that one call. Errors are LibreTranslate's: {"error": message} with 400 for bad input
(what the native API answers 404/422), 403 for the key, 429 for a full queue.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.batching.wait import Disconnected
from app.core.errors import NotFound, ServiceError
from app.files.formats import FORMATS
from app.schemas import (
    AUTO,
    LIMITED,
    MAX_TEXTS,
    GlossaryTerms,
    Str,
    TranslateRequest,
    TranslateResponse,
    TranslationResult,
)
from app.serving.protocol import Serving
from app.tasks.translation import TranslationTask
from app.tasks.translation_routes import translation_routes
from app.text.blank import is_blank
from app.text.html import HtmlDocument

# n-best = 1 + alternatives, within TranslateRequest's num_hypotheses limit
MAX_ALTERNATIVES = (
    next(m.le for m in TranslateRequest.model_fields["num_hypotheses"].metadata if hasattr(m, "le")) - 1
)
DEFAULT_BEAM = TranslateRequest.model_fields["beam_size"].default
# LibreTranslate's detectedLanguage for a text without language (a blank q, a q without letters)
NOTHING_DETECTED = {"confidence": 0.0, "language": "en"}
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits after typing before it asks
LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fa": "Persian", "fi": "Finnish",
    "fr": "French", "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nb": "Norwegian",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak",
    "sl": "Slovenian", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese",
    "zh": "Chinese",
}  # fmt: skip
# q as the OpenAPI document states it (_given and _check_limits check it): a text, or a list of texts (blank
# ones answered blank), within APP_MAX_CHARS and APP_MAX_TEXTS
_LtText = Annotated[Str, Field(json_schema_extra={LIMITED: {"maxLength": "max_chars"}})]
_Q = (
    Annotated[_LtText, Field(json_schema_extra={"minLength": 1})]
    | Annotated[list[_LtText], Field(json_schema_extra={"minItems": 1, LIMITED: {"maxItems": "max_texts"}})]
)
# a character str.strip() keeps (ECMA-262's \s lacks \x1c-\x1f and \x85): a code that strips to "" is missing
_NOT_BLANK = r"[^\s\x1c-\x1f\x85]"
_FIELDS = {"texts": "q", "text": "q", "source_lang": "source", "target_lang": "target"}  # ours -> theirs


class LtError(Exception):
    """An answer in LibreTranslate's error shape: {"error": message} with this status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class _Params(BaseModel):
    # lax: form fields are strings ("alternatives": "3"); unknown fields are ignored, as LibreTranslate does
    model_config = ConfigDict(extra="ignore")

    q: _Q = Field(description="Text, or a list of texts (a form repeats the field).")
    api_key: str | None = Field(None, description="Or Authorization: Bearer / X-API-Key, as on every route.")

    @field_validator("q")
    @classmethod
    def _given(cls, v: str | list[str]) -> str | list[str]:
        if not v:
            raise ValueError("missing")
        return v

    @property
    def texts(self) -> list[str]:
        return [self.q] if isinstance(self.q, str) else self.q


class TranslateParams(_Params):
    source: str = Field(
        min_length=1,
        description='Language code (any case), or "auto" to detect it.',
        json_schema_extra={"pattern": _NOT_BLANK},
    )
    target: str = Field(min_length=1, json_schema_extra={"pattern": _NOT_BLANK})
    format: Literal["text", "html"] = Field("text", description="html: markup kept, text by sentence.")
    alternatives: int = Field(
        0,
        description=f"More translations from the n-best: below 0 is 0, at most {MAX_ALTERNATIVES}.",
        json_schema_extra={"maximum": MAX_ALTERNATIVES},  # checked by _clamped, LibreTranslate's way
    )
    glossary: GlossaryTerms | None = Field(
        None,
        description='Not LibreTranslate\'s: {"source term": "target term"}, as POST /translate\'s glossary; a '
        "form sends it JSON-encoded.",
    )

    glossary_id: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="Not LibreTranslate's: a stored glossary (POST /glossaries) instead of glossary; its "
        "languages must be source's (detected, with auto) and target's.",
    )

    @field_validator("source", "target", mode="before")
    @classmethod
    def _lowercase(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v  # LibreTranslate lowercases codes: FR is fr

    @field_validator("format", mode="before")
    @classmethod
    def _default_format(cls, v: object) -> object:
        return "text" if v in ("", None) else v

    @field_validator("glossary", mode="before")
    @classmethod
    def _decoded(cls, v: object) -> object:
        """A form's field is a string: the JSON object it encodes (a JSON body may send either)."""
        if not isinstance(v, str):
            return v
        try:
            return json.loads(v) if v.strip() else None
        except ValueError as e:
            raise ValueError(f"is not a JSON object ({e})") from None

    @field_validator("alternatives", mode="before")
    @classmethod
    def _clamped(cls, v: object) -> int:
        """As LibreTranslate: int(v) (a form's string too), negative is 0, above the limit an error."""
        try:
            n = max(0, int(v))  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            raise ValueError("is not a number") from None
        if n > MAX_ALTERNATIVES:
            raise ValueError(f"must be <= {MAX_ALTERNATIVES}")
        return n


class DetectParams(_Params):
    pass


P = TypeVar("P", bound=_Params)


def parse(model: type[P], fields: dict[str, Any]) -> P:
    """The fields of a body as `model`; LtError 400 naming the field otherwise."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        err = max(e.errors(), key=lambda err: len(err["loc"]))  # of q's union, the list item's if any
        field = str(err["loc"][0]) if err["loc"] else "body"
        if err["type"] in ("missing", "string_too_short") or (field == "q" and "missing" in err["msg"]):
            raise LtError(400, f"Invalid request: missing {field} parameter") from None
        if field == "format":
            raise LtError(400, f"{err['input']} format is not supported") from None
        if field == "alternatives":  # LibreTranslate's wording
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise LtError(400, f"Invalid request: alternatives parameter {msg}") from None
        where = field + "".join(f"[{part}]" for part in err["loc"] if isinstance(part, int))
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise LtError(400, f"Invalid request: {where}: {msg}") from None


async def translate(service: Serving, p: TranslateParams, disconnected: Disconnected) -> dict[str, Any]:
    """LibreTranslate's /translate answer for `p`: one service call (one per detected language for HTML
    documents in different languages)."""
    texts, settings, single = p.texts, service.settings, isinstance(p.q, str)
    _check_limits(texts, settings.max_texts, settings.max_chars)
    _check_languages(service, p.source, p.target)
    n = 1 if p.format == "html" else p.alternatives + 1  # LibreTranslate gives no alternatives for HTML
    docs = [HtmlDocument(t) for t in texts] if p.format == "html" else None
    # what is translated, and which q each came from (blank texts and HTML without text are not sent)
    if docs is not None:
        sources, origin = [s for d in docs for s in d.texts], [i for i, d in enumerate(docs) for _ in d.texts]
        if len(sources) > MAX_TEXTS:
            raise LtError(
                400, f"Invalid request: q has {len(sources)} HTML text blocks, more than {MAX_TEXTS}"
            )
    else:
        origin = [i for i, t in enumerate(texts) if not is_blank(t)]  # as whitespace, what no model reads
        sources = [texts[i] for i in origin]
    # source language -> indices into sources. "auto": the service detects each text; an HTML document is
    # detected here as a whole (its blocks alone are too short to tell)
    detected: list[dict[str, Any]] = [dict(NOTHING_DETECTED) for _ in texts]
    groups = {p.source: list(range(len(sources)))}
    doc_lang = [p.source] * len(texts)  # an HTML document's language (its sentences are split in it)
    if p.source == AUTO and docs is not None:
        groups = {}
        for i, lang, detection in await _detect_documents(service, docs, p.target, single):
            detected[i], doc_lang[i] = detection, lang
            groups.setdefault(lang, []).extend(j for j, o in enumerate(origin) if o == i)
    calls = [
        _translate(service, [sources[j] for j in idxs], [origin[j] for j in idxs], src, p.target, n,
                   disconnected, not single, p.glossary, p.glossary_id)
        for src, idxs in groups.items()
    ]  # fmt: skip
    results: list[Any] = [None] * len(sources)
    for idxs, part in zip(groups.values(), await asyncio.gather(*calls), strict=True):
        for j, r in zip(idxs, part, strict=True):
            results[j] = r
    out, alternatives = [""] * len(texts), [[] for _ in texts]
    if docs is not None:
        at = 0
        for i, d in enumerate(docs):
            out[i] = d.render(
                [r.translation for r in results[at : at + len(d.texts)]], (doc_lang[i], p.target)
            )
            at += len(d.texts)
    else:
        for i, r in zip(origin, results, strict=True):
            out[i] = r.translation
            alternatives[i] = [h.translation for h in (r.hypotheses or [])[1:] if h.translation]
            if r.detected_language is not None:
                detected[i] = _detection(r.detected_language.language, r.detected_language.confidence)
    answer: dict[str, Any] = {"translatedText": out[0] if single else out}
    if p.source == AUTO:
        answer["detectedLanguage"] = detected[0] if single else detected
    if p.alternatives > 0:
        answer["alternatives"] = alternatives[0] if single else alternatives
    return answer


async def _detect_documents(
    service: Serving, docs: list[HtmlDocument], target: str, single: bool
) -> list[tuple[int, str, dict[str, Any]]]:
    """(q index, language, detectedLanguage) of each document with text; 400 for an unserved language."""
    with_text = [i for i, d in enumerate(docs) if d.texts]
    found = await service.detect([" ".join(docs[i].texts) for i in with_text])
    assert service.registry is not None  # the service has detected: it has started
    routes = translation_routes(service.settings, service.registry)
    out = []
    for i, detections in zip(with_text, found, strict=True):
        best = detections[0] if detections else None
        if best is None or best.language == target:  # passed through by the service
            lang = best.language if best else target
            out.append((i, lang, _detection(lang, best.confidence) if best else dict(NOTHING_DETECTED)))
            continue
        try:  # the same check and message as the native "auto"
            routes.auto_translator(detections, target, None, ("q",) if single else ("q", i))
        except RequestValidationError as e:
            raise LtError(400, f"Invalid request: {_theirs(e.errors()[0]['msg'])}") from None
        out.append((i, best.language, _detection(best.language, best.confidence)))
    return out


def _check_languages(service: Serving, source: str, target: str) -> None:
    """LibreTranslate's 400s: "zz is not supported" for a language no pair has, then the pair's own."""
    pairs = _pairs(service)
    served = {lang for pair in pairs for lang in pair}
    for code in (source, target):
        if code not in served and code != AUTO:
            raise LtError(400, f"{code} is not supported")
    if source not in (AUTO, target) and (source, target) not in pairs:
        raise LtError(
            400,
            f"{name(target)} ({target}) is not available as a target language from {name(source)} ({source})",
        )


def _detection(language: str, confidence: float) -> dict[str, Any]:
    """LibreTranslate's detectedLanguage: confidence 0-100."""
    return {"confidence": round(100 * confidence, 1), "language": language}


async def _translate(
    service: Serving,
    sources: list[str],
    origin: list[int],
    source: str,
    target: str,
    n: int,
    disconnected: Disconnected,
    many: bool,
    glossary: dict[str, str] | None = None,
    glossary_id: str | None = None,
) -> list[TranslationResult]:
    """The translation task on `sources` (from q[origin[i]]); its 404/422 as LibreTranslate's 400 naming q."""
    if not sources:
        return []
    try:
        fields = {"texts": sources, "source_lang": source, "target_lang": target}
        fields |= {"glossary": glossary, "glossary_id": glossary_id}
        req = TranslateRequest.model_validate(
            fields | {"num_hypotheses": n, "beam_size": max(DEFAULT_BEAM, n)}
        )
    except ValidationError as e:
        err = e.errors()[0]
        loc = [_FIELDS.get(str(part), part) for part in err["loc"]]
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise LtError(400, f"Invalid request: {_where(loc, origin, many)}: {msg}") from None
    try:
        answer: TranslateResponse = await service.answer(
            TranslationTask.name, req, disconnected, max_texts=len(sources)
        )
    except RequestValidationError as e:
        err = e.errors()[0]
        loc = [_FIELDS.get(str(part), part) for part in err["loc"][1:]]  # after "body"
        msg = str(err["msg"]).split(": ", 1)[-1]  # the service names its own field first
        raise LtError(400, f"Invalid request: {_where(loc, origin, many)}: {_theirs(msg)}") from None
    except NotFound as e:
        raise LtError(400, _theirs(e.message)) from None
    return answer.results


def _theirs(message: str) -> str:
    """A service message with LibreTranslate's field names."""
    message = message.replace("source_lang/target_lang", "source/target")
    return message.replace('"source_lang"', '"source"').replace('"target_lang"', '"target"')


def _where(loc: Sequence[Any], origin: list[int], many: bool) -> str:
    """["q", 3] (the 4th text sent) -> "q[7]" (the q it came from), or "q" for a single q."""
    if loc and loc[0] == "q":
        return f"q[{origin[loc[1]]}]" if many and len(loc) > 1 and isinstance(loc[1], int) else "q"
    return ".".join(str(part) for part in loc) or "body"


def _check_limits(texts: list[str], max_texts: int, max_chars: int) -> None:
    """LibreTranslate's batch and character limits (APP_MAX_TEXTS, APP_MAX_CHARS) in its words, naming the
    q of a list; markup counts."""
    if len(texts) > max_texts:
        raise LtError(400, f"Invalid request: request ({len(texts)}) exceeds text limit ({max_texts})")
    for i, text in enumerate(texts):
        if len(text) > max_chars:
            where = f" (q[{i}])" if len(texts) > 1 else ""
            raise LtError(
                400, f"Invalid request: request ({len(text)}) exceeds text limit ({max_chars}){where}"
            )


async def detect(service: Serving, p: DetectParams) -> list[dict[str, Any]]:
    """The languages of q among those /languages lists, best first; for a list, confidences averaged over
    its texts (as LibreTranslate)."""
    texts, settings = p.texts, service.settings
    _check_limits(texts, settings.max_texts, settings.max_chars)
    served = {code for pair in _pairs(service) for code in pair}
    totals: dict[str, float] = {}
    found = [f for f in await service.detect(texts) if f]  # a text without letters tells nothing
    for detections in found:
        for d in detections:
            if d.language in served:  # not a language no model serves, which the detector may name first
                totals[d.language] = totals.get(d.language, 0.0) + d.confidence / len(found)
    ranked = sorted(totals.items(), key=lambda lc: -lc[1])
    # nothing to go on: LibreTranslate's answer, English with confidence 0
    return [_detection(lang, confidence) for lang, confidence in ranked] or [dict(NOTHING_DETECTED)]


def languages(service: Serving) -> list[dict[str, Any]]:
    """Every language of a served pair, with the targets it translates into."""
    pairs = _pairs(service)
    codes = sorted({c for pair in pairs for c in pair})
    return [{"code": c, "name": name(c), "targets": sorted(t for s, t in pairs if s == c)} for c in codes]


def frontend_settings(service: Serving) -> dict[str, Any]:
    """The settings LibreTranslate's page and clients read: limits, whether a key is needed, defaults."""
    settings, pairs = service.settings, _pairs(service)
    keyed = settings.api_key is not None
    targets = sorted({t for _, t in pairs})
    target = "en" if "en" in targets else (targets[0] if targets else "en")
    return {
        "charLimit": settings.max_chars,
        "batchLimit": settings.max_texts,  # not LibreTranslate's: how many q one request may hold
        "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "apiKeys": keyed,
        "keyRequired": keyed,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": list(FORMATS),  # app/files/formats/
        "language": {
            "source": {"code": AUTO, "name": "Auto Detect"},  # LibreTranslate's default
            "target": {"code": target, "name": name(target)},
        },
    }


def name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def _pairs(service: Serving) -> list[tuple[str, str]]:
    if service.registry is None:
        raise LtError(503, f"not ready: {service.reason}")
    return sorted(translation_routes(service.settings, service.registry).pairs)


def error_of(exc: ServiceError) -> LtError:
    """A service error (429, 503, 504, 500) in LibreTranslate's shape; a 404 is LibreTranslate's 400."""
    if isinstance(exc, NotFound):
        return LtError(400, exc.message)
    prefix = "Slowdown: " if exc.status_code == 429 else ""  # LibreTranslate's 429 message starts so
    return LtError(exc.status_code, prefix + exc.message, exc.headers)

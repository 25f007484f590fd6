"""Request and response bodies. Static limits live here; limits from settings are checked by the service, and
marked here (LIMITED) for the OpenAPI document, which states them with the running app's values."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from app.text.blank import BLANK, READ_PATTERN
from app.text.langid import Detection
from app.text.passthrough import PASSTHROUGH
from model.glossary import normal


def _unicode(text: str) -> str:
    """JSON may escape a lone UTF-16 surrogate ("\\ud800"): not text, and the tokenizers cannot take it."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"contains an unpaired UTF-16 surrogate (\\u{ord(text[e.start]):04x} at character {e.start})"
            ) from None
    return text


def _not_blank(text: str) -> str:
    if BLANK.fullmatch(text) is not None:  # app.text.blank.is_blank, without a call per text
        hidden = next((c for c in text if not c.isspace()), None)
        why = f" (it has only characters the models ignore, e.g. U+{ord(hidden):04X})" if hidden else ""
        raise ValueError(f"must not be empty or whitespace only{why}")
    return _unicode(text)


MAX_MODEL_NAME = 100  # characters of a requested model name (a checkpoint directory's name)


def _model_name(name: str) -> str:
    """Checked here, not with max_length: pydantic's length check refuses a lone surrogate less clearly."""
    if len(name) > MAX_MODEL_NAME:
        raise ValueError(f"at most {MAX_MODEL_NAME} characters (got {len(name)})")
    return _unicode(name)


def _integral(value: object) -> object:
    """A JSON number with no fraction is an integer (JSON Schema's "integer" takes 2.0): 2.0 is 2, in a list
    too; a bool or a string stays what it is, for strict validation to refuse. A field_validator, as a
    BeforeValidator in the type would lose the schema's minimum and maximum (pydantic writes "ge", "le")."""
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


# OpenAPI: {keyword: setting} on a field whose limit a setting sets; app/api/openapi.py writes in the running
# app's value, e.g. {"maxItems": "max_texts"} -> "maxItems": 64 (APP_MAX_TEXTS)
LIMITED = "x-limit"
Str = Annotated[str, AfterValidator(_unicode)]
# minLength and pattern: the schema refuses what _not_blank refuses ("", nothing a model reads), as far as a
# pattern can say it (a text of astral characters the models ignore only is refused by the server alone)
Text = Annotated[
    str,
    AfterValidator(_not_blank),
    Field(json_schema_extra={"minLength": 1, "pattern": READ_PATTERN, LIMITED: {"maxLength": "max_chars"}}),
]
ModelName = Annotated[
    str, AfterValidator(_model_name), Field(json_schema_extra={"maxLength": MAX_MODEL_NAME})
]
# OpenAPI for _TextsRequest._exactly_one: one of the two present and not null
EXACTLY_ONE_TEXT: dict[str, Any] = {
    "oneOf": [
        {"required": ["text"], "properties": {"text": {"type": "string"}}},
        {"required": ["texts"], "properties": {"texts": {"type": "array"}}},
    ]
}
MAX_BEAM, DEFAULT_BEAM = 16, 4  # beam_size; num_hypotheses is at most beam_size
# OpenAPI for TranslateRequest._within_beam: JSON Schema cannot compare two fields, but both are small
# integers: num_hypotheses <= beam_size holds when some k has num_hypotheses <= k <= beam_size (an absent
# beam_size is DEFAULT_BEAM, an absent num_hypotheses 1)
N_BEST_WITHIN_BEAM: dict[str, Any] = {
    "anyOf": [
        {"properties": {"num_hypotheses": {"maximum": k}, "beam_size": {"minimum": k}}}
        | ({"required": ["beam_size"]} if k > DEFAULT_BEAM else {})
        for k in range(1, MAX_BEAM + 1)
    ]
}
DEFAULT_LENGTH_PENALTY = 0.6
LENGTH_PENALTY_STEP = 0.05  # length_penalty is a multiple of this: each value makes a decoding queue
AUTO = "auto"  # source_lang: detect each text's language (app.text.langid)
UNDETERMINED = "und"  # /detect's language for a text without letters (BCP 47's and ISO 639-2's code)
# the most APP_MAX_TEXTS may be: a longer list fails at the schema with one error (the 4,097th item stops it);
# the OpenAPI document states APP_MAX_TEXTS itself
MAX_TEXTS = 4096
Texts = Annotated[
    list[Text],
    Field(min_length=1, max_length=MAX_TEXTS, json_schema_extra={LIMITED: {"maxItems": "max_texts"}}),
]
# a glossary term, source or target (model/glossary.py): text a model reads, within APP_MAX_TERM_CHARS; a
# glossary within APP_MAX_GLOSSARY_TERMS, its source terms distinct ignoring case and spacing (_distinct_terms,
# which no schema can state)
_TERM: dict[str, Any] = {"minLength": 1, "pattern": READ_PATTERN, LIMITED: {"maxLength": "max_term_chars"}}
Term = Annotated[str, AfterValidator(_not_blank)]
# (pydantic writes a key's pattern as patternProperties, which leaves other keys free)
GLOSSARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "propertyNames": _TERM,
    "additionalProperties": {"type": "string", **_TERM},
    LIMITED: {"maxProperties": "max_glossary_terms"},
}
GlossaryTerms = Annotated[dict[Term, Term], WithJsonSchema(GLOSSARY_SCHEMA)]


def distinct_terms(v: dict[str, str] | None) -> dict[str, str] | None:
    """A glossary's source terms differ ignoring case and spacing (model/glossary.py matches them so)."""
    seen: dict[str, str] = {}
    for term in v or {}:
        if (same := seen.setdefault(normal(term), term)) != term:
            raise ValueError(f"source terms must differ ignoring case: {same!r} and {term!r}")
    return v


# OpenAPI for TranslateRequest._glossary_replaces: replace_unknowns false takes no glossary term and no stored
# glossary. (That the two are not given together is said in words only: schemathesis generates from no
# second disjunction beside N_BEST_WITHIN_BEAM's.)
GLOSSARY_REPLACES: dict[str, Any] = {
    "if": {"required": ["replace_unknowns"], "properties": {"replace_unknowns": {"const": False}}},
    "then": {
        "properties": {
            "glossary": {"type": ["null", "object"], "maxProperties": 0},
            "glossary_id": {"type": "null"},
        }
    },
}
MAX_SELECTED = 256  # attention layers/heads listed in one request
Matrix4 = list[list[list[list[float]]]]  # [layer][head][query][key]


class _Request(BaseModel):
    # strict: a JSON true is not the integer 1, "3" not 3, 2.5 not 2 (an integer field takes JSON integers,
    # and numbers without a fraction: _integral)
    model_config = ConfigDict(extra="forbid", strict=True)


class _TextsRequest(_Request):
    text: Text | None = Field(None, description="One text (give `text` or `texts`, not both).")
    texts: Texts | None = Field(None, description="Several texts, answered in order.")

    @model_validator(mode="after")
    def _exactly_one(self) -> _TextsRequest:
        if (self.text is None) == (self.texts is None):
            raise ValueError('give exactly one of "text" or "texts"')
        return self

    @property
    def inputs(self) -> tuple[list[str], str]:
        """The texts, in order, and the field they came in ("text" or "texts": error locations)."""
        if self.text is not None:
            return [self.text], "text"
        return list(self.texts or []), "texts"


class SentimentRequest(_TextsRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "A wonderful, moving film."},
                {"texts": ["I loved it.", "정말 재미없어요", "Dull and far too long."]},
                {"texts": ["Great acting."], "model": "sentiment-en"},
            ],
            **EXACTLY_ONE_TEXT,
        }
    )

    model: ModelName | None = Field(
        None, description="Model name; default per text: any Hangul -> sentiment-ko, else sentiment-en."
    )


class TranslateRequest(_TextsRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "Le chat dort. Il fait beau !", "source_lang": "fr"},
                {
                    "texts": ["Bonjour.", "Je voudrais un café."],
                    "source_lang": "fr",
                    "target_lang": "en",
                    "beam_size": 5,
                    "num_hypotheses": 3,
                    "return_scores": True,
                },
                {"texts": ["Le chat dort.", "¿Dónde está la estación?"], "source_lang": "auto"},
                {"text": "Le chat dort sur le canapé.", "source_lang": "fr", "glossary": {"canapé": "couch"}},
            ],
            **EXACTLY_ONE_TEXT,
            **N_BEST_WITHIN_BEAM,
            **GLOSSARY_REPLACES,
        }
    )

    source_lang: Str = Field(
        min_length=2,
        max_length=12,
        description='Source language code, e.g. fr; "auto" detects each text\'s language (mixed batches too).',
    )
    target_lang: Str = Field("en", min_length=2, max_length=12, description="Target language code.")
    beam_size: int = Field(DEFAULT_BEAM, ge=1, le=MAX_BEAM, description="1 = greedy search.")
    max_length: int | None = Field(
        None,
        ge=1,
        le=512,
        description="Generated tokens per sentence (EOS included); default min(256, 2 * source tokens + 10).",
    )
    length_penalty: float = Field(
        DEFAULT_LENGTH_PENALTY,
        ge=0.0,
        le=2.0,
        allow_inf_nan=False,
        json_schema_extra={"multipleOf": LENGTH_PENALTY_STEP},  # checked by _on_grid, with a float tolerance
        description=f"GNMT alpha, a multiple of {LENGTH_PENALTY_STEP}; 0 = plain log-probability.",
    )
    num_hypotheses: int = Field(
        1,
        ge=1,
        le=MAX_BEAM,
        description="n-best list size, at most beam_size (fewer when fewer distinct exist).",
    )
    return_scores: bool = Field(
        False, description="Add each translation's length-normalised log-probability."
    )
    replace_unknowns: bool = Field(
        True,
        description="Keep items the model cannot translate (numbers, prices, dates, codes such as v2.3, URLs, "
        "e-mails, @mentions, #hashtags, emoji, list markers) out of what it reads and put each back verbatim "
        "where the translation aligns it; each <unk> the model writes becomes the source text it attends to "
        "most. false: the model reads the source as written and answers raw, \u2047 for each <unk>.",
    )
    model: ModelName | None = Field(
        None, description="Model name; default: the model covering the language pair."
    )
    glossary: GlossaryTerms | None = Field(
        None,
        description='{"source term": "target term"}: each source term found in a text (at word boundaries, '
        "ignoring case, the longest first; not inside a protected item) comes out exactly as given, where the "
        "translation aligns it. At most APP_MAX_GLOSSARY_TERMS terms of at most APP_MAX_TERM_CHARS "
        "characters each, the source terms distinct ignoring case; needs replace_unknowns.",
    )

    glossary_id: Str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="A stored glossary (POST /glossaries) instead of `glossary` (not both): its source_lang and "
        "target_lang "
        'must be the request\'s (with "auto", every translated text must be detected in its source_lang).',
    )

    _integers = field_validator("beam_size", "max_length", "num_hypotheses", mode="before")(_integral)

    _distinct_terms = field_validator("glossary")(distinct_terms)

    @model_validator(mode="after")
    def _glossary_replaces(self) -> TranslateRequest:
        if self.glossary and self.glossary_id is not None:  # (an empty glossary is none)
            raise ValueError('give "glossary" or "glossary_id", not both')
        if (self.glossary or self.glossary_id is not None) and not self.replace_unknowns:
            raise ValueError("a glossary needs replace_unknowns true (its terms are put in as items are)")
        return self

    @field_validator("length_penalty")
    @classmethod
    def _on_grid(cls, v: float) -> float:
        steps = v / LENGTH_PENALTY_STEP
        if abs(steps - round(steps)) > 1e-6:
            raise ValueError(f"must be a multiple of {LENGTH_PENALTY_STEP} (0, 0.05, ..., 2), got {v}")
        return round(round(steps) * LENGTH_PENALTY_STEP, 2)  # equal values make equal decoding keys

    @field_validator("num_hypotheses")
    @classmethod
    def _within_beam(cls, v: int, info: ValidationInfo) -> int:
        beam = info.data.get("beam_size")
        if beam is not None and v > beam:
            raise ValueError(f"must be at most beam_size ({beam}), got {v}")
        return v


class DetectRequest(_TextsRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "Je voudrais un café, s'il vous plaît."},
                {"texts": ["Der Hund schläft.", "정말 재미있어요"], "candidates": True},
            ],
            **EXACTLY_ONE_TEXT,
        }
    )

    candidates: bool = Field(False, description="Add every served language's confidence, best first.")


class AttentionRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": "sentiment-en", "text": "Not bad at all.", "layers": [0], "heads": [0, 1]},
                {"model": "translate-fr-en", "text": "Le chat dort.", "target": "The cat sleeps."},
                {"model": "translate-fr-en", "text": "Le chat dort.", "format": "png"},
            ]
        }
    )

    model: ModelName = Field(description="A loaded model (see GET /models).")
    text: Text = Field(description="Source text (one sequence, not split into sentences).")
    target: Text | None = Field(
        None,
        description="Translation models only (422 for a classifier): the target to force-decode; default: "
        "the greedy translation.",
    )
    target_lang: Str | None = Field(
        None,
        min_length=2,
        max_length=12,
        description="Translation models only (422 for a classifier): the target language (multilingual "
        "models).",
    )
    layers: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_SELECTED,
        description="Default: all. An index selects that layer in each stack that has it (encoder, decoder).",
        json_schema_extra={"uniqueItems": True},  # each at most once (422 otherwise: a bounded answer)
    )
    heads: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_SELECTED,
        description="Default: all.",
        json_schema_extra={"uniqueItems": True},
    )
    format: Literal["json", "png"] = Field("json", description="png: a heatmap grid (also ?format=png).")

    _integers = field_validator("layers", "heads", mode="before")(_integral)


class SentimentResult(BaseModel):
    model: str
    label: str
    score: float = Field(description="Probability of the chosen label.")
    probabilities: dict[str, float]


class SentimentResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "sentiment-en",
                    "results": [
                        {
                            "model": "sentiment-en",
                            "label": "positive",
                            "score": 0.97,
                            "probabilities": {"negative": 0.03, "positive": 0.97},
                        }
                    ],
                }
            ]
        }
    )

    model: str = Field(description="The model used; comma-joined when texts were routed to several.")
    results: list[SentimentResult]


class ScoredTranslation(BaseModel):
    translation: str
    score: float


class DetectedLanguage(BaseModel):
    language: str = Field(description="ISO 639-1 code.")
    confidence: float = Field(ge=0.0, le=1.0)

    @classmethod
    def of(cls, found: Detection) -> DetectedLanguage:
        return cls(language=found.language, confidence=found.confidence)


class DetectResult(BaseModel):
    language: str = Field(
        description="ISO 639-1; a language no model serves when the text is clearly in one (then 422 on "
        '/translate with source_lang "auto"), else the most likely served one; "und" (undetermined, '
        "confidence 0) for a text without letters."
    )
    confidence: float = Field(ge=0.0, le=1.0)
    candidates: list[DetectedLanguage] | None = None


class DetectResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"results": [{"language": "fr", "confidence": 0.99}]}]}
    )

    results: list[DetectResult]


class TranslationResult(BaseModel):
    translation: str
    score: float | None = None
    hypotheses: list[ScoredTranslation] | None = None
    model: str | None = Field(
        None,
        description='source_lang "auto": the model that translated this text. "passthrough" (any source_lang): '
        "it came back unchanged, without a model (no letters in it, or already in the target language).",
    )
    detected_language: DetectedLanguage | None = Field(None, description='source_lang "auto" only.')

    @classmethod
    def unchanged(
        cls, text: str, req: TranslateRequest, detected: DetectedLanguage | None
    ) -> TranslationResult:
        """A text passed through: itself, as the only hypothesis (score 0: log 1), answered by no model."""
        return cls(
            translation=text,
            score=0.0 if req.return_scores else None,
            hypotheses=[ScoredTranslation(translation=text, score=0.0)] if req.num_hypotheses > 1 else None,
            model=PASSTHROUGH,
            detected_language=detected,
        )


class TranslateResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": "translate-fr-en", "results": [{"translation": "The cat is sleeping."}]}]
        }
    )

    model: str = Field(
        description='The models used, comma-joined; "passthrough" when texts came back unchanged.'
    )
    results: list[TranslationResult]


class AttentionResponse(BaseModel):
    model: str
    layers: list[int] = Field(description="The layers of encoder_self_attention.")
    decoder_layers: list[int] | None = Field(
        None, description="Translators: the layers of decoder_self_attention and cross_attention."
    )
    heads: list[int]
    source_tokens: list[str]
    target_tokens: list[str] | None = None
    encoder_self_attention: Matrix4
    decoder_self_attention: Matrix4 | None = None
    cross_attention: Matrix4 | None = Field(None, description="[layer][head][target][source]")
    translation: str | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "loading", "reason": "loading translate-fr-en (2 of 3)"}]}
    )

    status: Literal["ready", "loading", "failed", "shutting_down"]
    reason: str | None = None
    models: dict[str, str] = Field(
        default_factory=dict, description="name -> loading | warming_up | ready | failed"
    )
    failed: dict[str, str] | None = Field(
        None, description="name -> why it failed to load (no filesystem path); absent when none failed"
    )
    pulling: dict[str, str] | None = Field(
        None,
        description="APP_MODELS: name -> how far its pull (or its load after) is; absent when none is left. "
        "The models on disk serve meanwhile.",
    )


class KnownLimit(BaseModel):
    kind: str = Field(description='What kind of text, e.g. "news text".')
    source: str
    output: str = Field(description="What this model answers for it (beam 4).")


class ModelInfo(BaseModel):
    name: str
    task: Literal["sentiment", "translation"]
    status: str
    source_langs: list[str]
    target_langs: list[str]
    labels: list[str]
    parameters: int | None
    dtype: str
    device: str
    max_len: int
    sha256: str | None
    metrics: dict[str, object]
    model_card: bool
    domain: str | None = Field(None, description="Translators: what they were trained on, and what not.")
    limits: list[KnownLimit] = Field(default_factory=list, description="Known limits, with examples.")
    origin: str = "trained"  # trained (here) | opus-mt (imported) | argos (an Argos Translate package)
    engine: Literal["torch", "ctranslate2"] = "torch"  # what decodes /translate
    graphs: Literal["pending", "building", "ready", "failed"] | None = Field(
        None,
        description="Its TorchScript graphs (APP_TORCHSCRIPT): a translator's are built after ready "
        "(APP_TORCHSCRIPT_AFTER_READY) and it decodes the same on the eager path until they are 'ready'; "
        "'failed': eager for good; null: none (turned off, or an engine without them).",
    )
    reason: str | None = Field(None, description="Why it failed to load (status failed).")
    version: str = Field(
        "0",
        description="The served version: a fingerprint of its folder's files (names, sizes, times), new when "
        "a pull or an import replaces them. A reload (POST /admin/models/{name}/reload) serves the new one.",
    )
    revision: str | None = Field(None, description="The hub commit it was pulled at (`training pull`).")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


class StoredModel(BaseModel):
    """A model folder of the checkpoint directory, served or not (GET /admin/models)."""

    name: str
    status: str = Field(description="Its state when served (loading, ready, failed...), else 'not_loaded'.")
    task: str | None = Field(None, description="From its config; null when it cannot be read.")
    origin: str | None = None
    version: str | None = Field(None, description="Its files' fingerprint on disk now.")
    served_version: str | None = Field(None, description="The version served; differs after a new pull.")
    reason: str | None = Field(None, description="Why it cannot be served, when it cannot.")


class StoredModels(BaseModel):
    models: list[StoredModel]


class ManagedModel(BaseModel):
    """What a load, reload or unload did (POST /admin/models/{name}/...)."""

    name: str
    action: Literal["load", "reload", "unload"]
    changed: bool = Field(description="False: nothing to do (a reload of unchanged files).")
    version: str | None = Field(None, description="The version served now; null once unloaded.")
    previous_version: str | None = Field(None, description="The version served before, if any.")
    seconds: float = Field(description="How long it took, the swap included.")

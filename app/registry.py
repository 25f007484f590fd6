"""The served checkpoints: discovery, loading, and routing by language (sentiment) or pair (translation).

A model directory is one of ours (config.json: trained here, or imported from OPUS-MT by `python -m
training import marian`) or an unpacked Argos Translate package (metadata.json + model/: engines/argos.py).

Routing (translation): each language pair goes to one model, the first by
  1. APP_ROUTES ("fr-en=opus-mt-fr-en,..."), which names the model outright;
  2. origin, in APP_ORIGIN_ORDER (default opus-mt, argos, trained: the broad-domain pretrained models
     before ours, trained on short Tatoeba sentences; OPUS-MT before Argos as it also serves /attention);
  3. the canonical name translate-SRC-TGT;
  4. name order.
A request's "model" overrides the route.

A model that fails (an unreadable config.json at discovery, or any error while loading) is recorded with its
reason (`fail`), the checkpoint's path taken out (it stays in the log). With APP_STRICT_READINESS (default)
its pairs stay routed to it and answer 503 naming it and its reason; without, they go to the next model in
the routing order, which the log says once, as an error.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.errors import NotFound, Unavailable, invalid
from app.core.settings import ENV_PREFIX, SettingsError
from app.schemas import MAX_MODEL_NAME, TranslateRequest
from app.text.langid import Detection
from engines.argos import (
    ArgosPackage,
    ArgosPackageError,
    NotTranslation,
    is_argos_package,
    read_argos_package,
)
from model.config import ModelConfig
from model.files import CONFIG, CheckpointError, read_config

if TYPE_CHECKING:  # torch: where weights load (the model process); routing (an HTTP process) needs none
    import torch

    from model import LoadedModel

log = logging.getLogger(__name__)

HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff]")
DATASET_LANGS = {"nsmc": "ko", "imdb": "en"}  # sentiment training sets -> language, when the name has none
ORIGINS = ("opus-mt", "argos", "trained")  # the default APP_ORIGIN_ORDER


def shown(name: str, limit: int = 40) -> str:
    """A requested name as a 404 echoes it: repr, cut to `limit` characters."""
    return repr(name if len(name) <= limit else name[:limit] + "…")


def text_language(text: str) -> str:
    """'ko' when the text has any Hangul character, else 'en' (the two sentiment models we ship)."""
    return "ko" if HANGUL.search(text) else "en"


@dataclass
class ModelEntry:
    """A discovered checkpoint; `loaded` is filled by the background loader."""

    name: str
    path: Path
    config: ModelConfig
    meta: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    has_card: bool = False
    loaded: LoadedModel | None = None
    package: ArgosPackage | None = None  # an Argos Translate package (no torch model: CTranslate2 only)

    @property
    def origin(self) -> str:
        """Where the weights come from: "trained" (here), "opus-mt" (imported) or "argos"."""
        return "argos" if self.package is not None else str(self.meta.get("origin", "trained"))

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def languages(self) -> list[str]:
        """Sentiment: the text language, from the config, else the name (sentiment-ko) or the training dataset."""
        if self.config.source_langs:
            return list(self.config.source_langs)
        suffix = self.name.rsplit("-", 1)[-1]
        if len(suffix) == 2 and suffix.isalpha():
            return [suffix.lower()]
        dataset = str(self.meta.get("training", {}).get("config", {}).get("dataset", ""))
        return [DATASET_LANGS[dataset]] if dataset in DATASET_LANGS else []

    def require_loaded(self) -> LoadedModel:
        if self.loaded is None:
            raise Unavailable(f"model {self.name} is still loading")
        return self.loaded


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def pairs_of(e: ModelEntry) -> list[tuple[str, str]]:
    """The (source, target) pairs a translation model serves."""
    ids = e.config.target_lang_ids
    return [
        (src, tgt)
        for src in e.config.source_langs
        for tgt in e.config.target_langs
        if src != tgt and not (ids and tgt not in ids)  # a multilingual model needs the target's tag
    ]


def route_pairs(
    entries: list[ModelEntry], origin_order: Sequence[str], routes: dict[str, str] | None
) -> dict[tuple[str, str], str]:
    """(source, target) -> the translator that serves it, chosen as the module docstring says; a route that
    names no translator of its pair fails start-up."""
    candidates: dict[tuple[str, str], list[ModelEntry]] = {}
    for e in sorted(entries, key=lambda e: e.name):
        if e.task != "sentiment":
            for pair in pairs_of(e):
                candidates.setdefault(pair, []).append(e)

    def rank(e: ModelEntry, pair: tuple[str, str]) -> tuple[int, bool, str]:
        order = list(origin_order)
        origin = order.index(e.origin) if e.origin in order else len(order)
        return origin, e.name != f"translate-{pair[0]}-{pair[1]}", e.name

    pairs = {pair: min(es, key=lambda e: rank(e, pair)).name for pair, es in candidates.items()}
    by_name = {e.name: e for e in entries}
    for route, name in (routes or {}).items():
        src, _, tgt = route.partition("-")
        entry = by_name.get(name)
        if entry is None or entry.task != "translation" or (src, tgt) not in pairs_of(entry):
            serves = ", ".join(f"{s}-{t}" for s, t in pairs_of(entry)) if entry else "not served"
            raise SettingsError(
                f"{ENV_PREFIX}ROUTES: {route}={name}, but {name} does not translate {src} -> {tgt} "
                f"({name}: {serves or 'no pairs'})"
            )
        pairs[(src, tgt)] = name
    return pairs


def sentiment_routes(entries: list[ModelEntry]) -> dict[str, str]:
    """Text language -> the sentiment model for it: the canonical sentiment-LANG, else the first by name."""
    by_lang: dict[str, str] = {}
    for e in sorted(entries, key=lambda e: e.name):
        if e.task == "sentiment":
            for lang in e.languages:
                if by_lang.get(lang) != f"sentiment-{lang}":
                    by_lang[lang] = e.name
    return by_lang


def public_reason(root: Path, error: BaseException) -> str:
    """An error's message as clients may read it: one line, paths under the checkpoint dir made relative
    (sentiment-ko/tokenizer.model), so no filesystem path leaves the server."""
    text = " ".join(str(error).split()) or type(error).__name__
    for base in {str(root.resolve()), str(root)}:
        text = text.replace(base.rstrip("/") + "/", "")
    return text


class Registry:
    def __init__(
        self,
        entries: list[ModelEntry],
        pairs: dict[tuple[str, str], str],
        device: torch.device | None,
        dtype: torch.dtype | None,
        quantize: str | None = None,
        failed: dict[str, str] | None = None,
        origin_order: Sequence[str] = ORIGINS,
        routes: dict[str, str] | None = None,
        max_model_bytes: int | None = None,
    ) -> None:
        """pairs: `route_pairs`' choice of translator per language pair (for origin_order and routes);
        failed: model -> reason, the models whose config.json could not be read; device and dtype None: a
        routing registry, which loads no weights (an HTTP process: app/parallel/remote.py);
        max_model_bytes: the memory one model may take (APP_MAX_MODEL_BYTES), None: no bound."""
        self.entries = {e.name: e for e in entries}
        self.pairs = pairs
        self.device, self.dtype, self.quantize = device, dtype, quantize
        self.max_model_bytes = max_model_bytes
        self.failed: dict[str, str] = dict(failed or {})
        self.origin_order, self.routes = origin_order, dict(routes or {})
        self.sentiment_by_lang = sentiment_routes(entries)

    def fail(self, name: str, reason: str, reroute: bool) -> None:
        """Record that `name` failed to load. reroute: its pairs (and languages) go to the next model in the
        routing order, logged once as an error; else they stay its own and answer 503 (`check_loaded`)."""
        self.failed[name] = reason
        if not reroute:
            return
        alive = [e for e in self.entries.values() if e.name not in self.failed]
        routes = {pair: m for pair, m in self.routes.items() if m not in self.failed}
        before, langs = self.pairs, self.sentiment_by_lang
        self.pairs = route_pairs(alive, self.origin_order, routes)
        self.sentiment_by_lang = sentiment_routes(alive)
        moved = [
            f"{s}-{t} -> {self.pairs.get((s, t), 'none')}"
            for (s, t), m in sorted(before.items())
            if m == name
        ]
        moved += [
            f"{lang} -> {self.sentiment_by_lang.get(lang, 'none')}" for lang, m in langs.items() if m == name
        ]
        log.error(
            "model %s failed to load (%s); APP_STRICT_READINESS=false: the others serve%s",
            name,
            reason,
            f"; its pairs now go to: {', '.join(moved)}" if moved else "",
        )

    def check_loaded(self, name: str) -> str:
        """`name`, or 503 naming it and why it failed to load."""
        if name in self.failed:
            raise Unavailable(f"model {name} failed to load: {self.failed[name]}", retry_after=None)
        return name

    @classmethod
    def discover(
        cls,
        root: Path,
        device: torch.device | None,
        dtype: torch.dtype | None,
        quantize: str | None = None,
        origin_order: Sequence[str] = ORIGINS,
        routes: dict[str, str] | None = None,
        max_model_bytes: int | None = None,
    ) -> Registry:
        """Read every `root/*/config.json` and Argos `root/*/metadata.json` (cheap: no weights); bad configs
        fail start-up."""
        if not root.is_dir():
            raise SettingsError(f"{ENV_PREFIX}CHECKPOINT_DIR={root}: directory does not exist")
        entries, failed = [], {}
        for path in sorted(p for p in root.iterdir() if (p / CONFIG).is_file() or is_argos_package(p)):
            if len(path.name) > MAX_MODEL_NAME:  # a request could not name it
                raise CheckpointError(
                    f"{path}: a model's name is its directory's, at most {MAX_MODEL_NAME} characters"
                )
            if not (path / CONFIG).is_file():
                try:
                    package = read_argos_package(path)
                except NotTranslation as e:  # argospm's packages dir also holds e.g. sentence splitters
                    log.warning("skipped %s", e)
                    continue
                except ArgosPackageError as e:  # as for ours: the model fails, the others serve
                    log.error("model %s failed: %s", path.name, e)
                    failed[path.name] = public_reason(root, e)
                    continue
                meta = {"origin": "argos", "argos": package.metadata}
                has_card = (path / "README.md").is_file()
                entries.append(
                    ModelEntry(path.name, path, package.config, meta, {}, has_card, package=package)
                )
                continue
            try:
                meta = read_config(path)
                try:
                    cfg = ModelConfig.from_dict(meta["model"])
                except (TypeError, ValueError) as e:
                    raise CheckpointError(f"{path / CONFIG}: invalid 'model' section ({e})") from e
            except CheckpointError as e:  # one behaviour for every checkpoint error: the model fails
                log.error("model %s failed: %s", path.name, e)
                failed[path.name] = public_reason(root, e)
                continue
            metrics = _read_json(path / "metrics.json")
            entries.append(ModelEntry(path.name, path, cfg, meta, metrics, (path / "README.md").is_file()))
        if not entries and failed:  # nothing could ever serve: fail start-up, naming each
            reasons = "; ".join(f"{n}: {r}" for n, r in failed.items())
            raise SettingsError(f"{ENV_PREFIX}CHECKPOINT_DIR={root}: no model can be served ({reasons})")
        if not entries:
            raise SettingsError(
                f"{ENV_PREFIX}CHECKPOINT_DIR={root}: no checkpoints (subdirectories holding a {CONFIG} "
                "or an Argos Translate package)"
            )
        pairs = route_pairs(entries, origin_order, routes)
        return cls(entries, pairs, device, dtype, quantize, failed, origin_order, routes, max_model_bytes)

    def load(self, name: str) -> LoadedModel:
        """Load one checkpoint's weights (blocking: run it in the inference thread); not for an Argos
        package (its handler opens it in CTranslate2)."""
        from model.checkpoint import OverBudget, load_checkpoint

        entry = self.entries[name]
        assert entry.package is None, f"{name} is an Argos package"
        assert self.device is not None, "a routing registry loads no weights"
        assert self.dtype is not None
        start = time.perf_counter()
        try:
            entry.loaded = load_checkpoint(
                entry.path, self.device, self.dtype, self.quantize, self.max_model_bytes
            )
        except OverBudget as e:
            raise OverBudget(f"{e} ({ENV_PREFIX}MAX_MODEL_BYTES)") from None
        log.info(
            "loaded %s (%s, %s parameters, %s on %s) in %.2fs",
            name,
            entry.task,
            f"{entry.loaded.num_parameters:,}",
            self.quantize or str(self.dtype).removeprefix("torch."),
            self.device,
            time.perf_counter() - start,
        )
        return entry.loaded

    @property
    def languages(self) -> list[str]:
        """Every language a text may be in: translator sources and targets (a text already in the target
        passes through) and sentiment languages (what /detect ranks)."""
        return sorted(self.pair_languages | set(self.sentiment_by_lang))

    @property
    def pair_languages(self) -> set[str]:
        """Every source and target language of a served pair."""
        return {lang for pair in self.pairs for lang in pair}

    def sources_for(self, target_lang: str) -> list[str]:
        return sorted(src for src, tgt in self.pairs if tgt == target_lang)

    def names(self, task: str) -> list[str]:
        return [n for n, e in self.entries.items() if e.task == task]

    def get(self, name: str, task: str) -> ModelEntry:
        entry = self.entries.get(name)
        if entry is None or entry.task != task:
            loaded = ", ".join(self.names(task)) or "none"
            raise NotFound(f"model: no {task} model named {shown(name)} (loaded {task} models: {loaded})")
        self.check_loaded(name)
        return entry

    def get_any(self, name: str) -> ModelEntry:
        entry = self.entries.get(name)
        if entry is None:
            raise NotFound(f"model: no model named {shown(name)} (loaded models: {', '.join(self.entries)})")
        self.check_loaded(name)
        return entry

    def target_lang(self, name: str, requested: str | None) -> str:
        """The target language of translator `name`: the requested one (422 unless it has it), else English
        when it has it, else its first."""
        cfg = self.entries[name].config
        lang = requested or ("en" if "en" in cfg.target_langs else cfg.target_langs[0])
        if lang not in cfg.target_langs or (cfg.target_lang_ids and lang not in cfg.target_lang_ids):
            raise invalid(
                ("target_lang",), f"{name} translates into {', '.join(cfg.target_langs)}, not {lang!r}"
            )
        return lang

    def sentiment_for(self, text: str, requested: str | None) -> str:
        """The requested model, or the default for the text's language."""
        if requested is not None:
            return self.get(requested, "sentiment").name
        lang = text_language(text)
        name = self.sentiment_by_lang.get(lang)
        if name is None:
            loaded = ", ".join(self.names("sentiment")) or "none"
            raise NotFound(
                f"model: no sentiment model for language {lang!r} (expected sentiment-{lang}); "
                f'loaded sentiment models: {loaded}; pass "model" to choose one'
            )
        return self.check_loaded(name)

    def translator_for(self, source_lang: str, target_lang: str, requested: str | None) -> str:
        if requested is not None:
            entry = self.get(requested, "translation")
            cfg = entry.config
            if source_lang not in cfg.source_langs or target_lang not in cfg.target_langs:
                raise NotFound(
                    f"model: {requested} translates {'/'.join(cfg.source_langs)} -> {'/'.join(cfg.target_langs)}, "
                    f"not {source_lang} -> {target_lang}"
                )
            return entry.name
        name = self.pairs.get((source_lang, target_lang))
        if name is None:
            available = ", ".join(f"{s}-{t}" for s, t in sorted(self.pairs)) or "none"
            raise NotFound(
                f"source_lang/target_lang: no model translates {source_lang} -> {target_lang} "
                f"(available pairs: {available})"
            )
        return self.check_loaded(name)

    def auto_translator(
        self, detections: list[Detection], target_lang: str, requested: str | None, loc: Sequence[str | int]
    ) -> str:
        """The model for a text's detected language; 422 naming it and the served source languages when none."""
        if not detections:
            raise invalid(loc, 'cannot detect the language of a text without letters: give "source_lang"')
        best = detections[0]
        try:
            return self.translator_for(best.language, target_lang, requested)
        except NotFound:
            entry = self.entries.get(requested) if requested else None
            served = list(entry.config.source_langs) if entry else self.sources_for(target_lang)
            who, which = (requested, "its source languages") if requested else ("no model", "served sources")
            raise invalid(
                loc,
                f"detected language {best.language!r} (confidence {best.confidence:.2f}), but {who} translates "
                f"it into {target_lang} ({which}: {', '.join(served) or 'none'})",
                "unsupported_language",
            ) from None

    def route(
        self,
        req: TranslateRequest,
        texts: list[str],
        field: str,
        detected: list[list[Detection]] | None,
        through: set[int],
    ) -> dict[str, list[int]]:
        """Model -> indices of `texts` (req.inputs) to translate (`through`: passed through): the pair's
        model, or per text its detected language's (`field`: error locations)."""
        todo = [i for i in range(len(texts)) if i not in through]
        if detected is None:
            if req.source_lang == req.target_lang and req.source_lang in self.pair_languages:
                return {}
            name = self.translator_for(req.source_lang, req.target_lang, req.model)  # 404 on no such pair
            return {name: todo} if todo else {}
        groups: dict[str, list[int]] = {}
        for i in todo:
            loc = (field,) if field == "text" else (field, i)
            groups.setdefault(self.auto_translator(detected[i], req.target_lang, req.model, loc), []).append(
                i
            )
        return groups

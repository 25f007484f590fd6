"""Which translator answers a request: by language pair (source and target), or per text by its detected
language (source_lang auto), or the request's "model".

Each language pair goes to one model, the first by
  1. APP_ROUTES ("fr-en=opus-mt-fr-en,..."), which names the model outright;
  2. origin, in APP_ORIGIN_ORDER (default opus-mt, argos, trained: the broad-domain pretrained models
     before ours, trained on short Tatoeba sentences; OPUS-MT before Argos as it also serves /attention);
  3. the canonical name translate-SRC-TGT;
  4. name order.
The table is the registry's view (Registry.view): rebuilt when a model comes, goes or fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.core.errors import NotFound, invalid
from app.core.settings import ENV_PREFIX, Settings, SettingsError
from app.schemas import TranslateRequest
from app.text.langid import Detection

if TYPE_CHECKING:
    from app.registry import ModelEntry, Registry

TASK = "translation"  # the configs' task of a translator


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
    names no translator of its pair is a settings error (start-up fails)."""
    candidates: dict[tuple[str, str], list[ModelEntry]] = {}
    for e in sorted(entries, key=lambda e: e.name):
        if e.task == TASK:
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
        if entry is None or entry.task != TASK or (src, tgt) not in pairs_of(entry):
            serves = ", ".join(f"{s}-{t}" for s, t in pairs_of(entry)) if entry else "not served"
            raise SettingsError(
                f"{ENV_PREFIX}ROUTES: {route}={name}, but {name} does not translate {src} -> {tgt} "
                f"({name}: {serves or 'no pairs'})"
            )
        pairs[(src, tgt)] = name
    return pairs


def target_lang(entry: ModelEntry, requested: str | None) -> str:
    """The target language of a translator: the requested one (422 unless it has it), else English when it
    has it, else its first."""
    cfg = entry.config
    lang = requested or ("en" if "en" in cfg.target_langs else cfg.target_langs[0])
    if lang not in cfg.target_langs or (cfg.target_lang_ids and lang not in cfg.target_lang_ids):
        raise invalid(
            ("target_lang",), f"{entry.name} translates into {', '.join(cfg.target_langs)}, not {lang!r}"
        )
    return lang


def translation_routes(settings: Settings, registry: Registry) -> TranslationRoutes:
    """The routing table of the registry as it is now (built once per change of it)."""
    key = (TASK, tuple(settings.origin_order), tuple(sorted(settings.routes.items())))
    return registry.view(key, lambda: TranslationRoutes(registry, settings))


class TranslationRoutes:
    def __init__(self, registry: Registry, settings: Settings) -> None:
        """Routes to the registry's routable models; APP_ROUTES that names a failed one is left out."""
        self.registry = registry
        failed = registry.rerouted
        routes = {pair: m for pair, m in settings.routes.items() if m not in failed}
        self.pairs = route_pairs(registry.routable(), settings.origin_order, routes)

    @property
    def pair_languages(self) -> set[str]:
        """Every source and target language of a served pair."""
        return {lang for pair in self.pairs for lang in pair}

    def table(self) -> dict[str, str]:
        """ "src-tgt" -> model."""
        return {f"{s}-{t}": m for (s, t), m in sorted(self.pairs.items())}

    def sources_for(self, target_lang: str) -> list[str]:
        return sorted(src for src, tgt in self.pairs if tgt == target_lang)

    def translator_for(self, source_lang: str, target_lang: str, requested: str | None) -> str:
        registry = self.registry
        if requested is not None:
            entry = registry.get(requested, TASK)
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
        return registry.check_loaded(name)

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
            entry = self.registry.entries.get(requested) if requested else None
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
            loc = (field, i) if field == "texts" else (field,)
            groups.setdefault(self.auto_translator(detected[i], req.target_lang, req.model, loc), []).append(
                i
            )
        return groups

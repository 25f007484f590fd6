"""Argos Translate packages: /translate through CTranslate2 (engines/argos.py), with no torch model.

The handler is a TranslationHandler whose `engine` is the package's CT2Decoder: sentences, joining,
scores and warm-up are TranslationHandler's. /attention refuses these models (app.tasks.attention.AttentionTask):
there are no torch weights to read attention maps from.
"""

from __future__ import annotations

import logging
from typing import Any

from app.tasks.handlers import TranslationHandler
from engines.argos import ArgosPackage, load_argos_decoder

log = logging.getLogger(__name__)


class ArgosTranslationHandler(TranslationHandler):
    """TranslationHandler over an Argos package's CTranslate2 model and sentencepiece model."""

    compiled = None  # type: ignore[assignment]  # no torch graphs to build (the property, overridden)

    def __init__(self, name: str, package: ArgosPackage, translator_kwargs: dict[str, Any]) -> None:
        # not TranslationHandler.__init__: it needs a torch model
        self.name, self.cfg, self.max_len = name, package.config, package.config.max_len
        self.engine, self.tokenizer = load_argos_decoder(package, **translator_kwargs)
        log.info(
            "%s: Argos package on CTranslate2 %s",
            name,
            ", ".join(f"{k}={v}" for k, v in translator_kwargs.items()),
        )

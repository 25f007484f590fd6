"""Argos Translate packages: /translate through CTranslate2 (engines/argos.py), with no torch model.

The handler is a TranslationHandler whose `decode` runs the package's CT2Decoder: sentences, joining,
scores and warm-up are TranslationHandler's. /attention refuses these models (service.Service._attention):
there are no torch weights to read attention maps from.
"""

from __future__ import annotations

import logging
from typing import Any

from app.tasks.handlers import TranslationHandler
from engines.argos import ArgosPackage, load_argos_decoder
from model import DecodeOptions, DecodingStopped, Hypothesis
from model.decoding import StopCheck

log = logging.getLogger(__name__)


class ArgosTranslationHandler(TranslationHandler):
    """TranslationHandler over an Argos package's CTranslate2 model and sentencepiece model."""

    def __init__(self, name: str, package: ArgosPackage, translator_kwargs: dict[str, Any]) -> None:
        # not TranslationHandler.__init__: it needs a torch model
        self.name, self.cfg, self.max_len = name, package.config, package.config.max_len
        self.engine, self.tokenizer = load_argos_decoder(package, **translator_kwargs)
        log.info(
            "%s: Argos package on CTranslate2 %s",
            name,
            ", ".join(f"{k}={v}" for k, v in translator_kwargs.items()),
        )

    def decode(
        self, seqs: list[list[int]], opts: DecodeOptions, target_lang: str, should_stop: StopCheck = None
    ) -> list[list[Hypothesis]]:
        """should_stop: checked once, before the batch (CTranslate2 decodes it in one call)."""
        if should_stop is not None and should_stop():
            raise DecodingStopped(0)
        return self.engine.translate_ids(seqs, opts, target_lang, batch_size=max(1, len(seqs)))

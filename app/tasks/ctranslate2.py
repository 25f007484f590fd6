"""APP_TRANSLATION_ENGINE=ctranslate2: /translate decoded by CTranslate2 through the same batchers.

The handler is a TranslationHandler whose `engine` decodes each dynamic batch (engines.ct2_decode.CT2Decoder):
sentences, joining, scores and warm-up are TranslationHandler's. The torch model still loads: /attention
reads its weights, and it decodes the few beam searches that reach their length limit (see
engines/ct2_decode.py). The checkpoint is converted at load into a temporary directory, removed once
CTranslate2 has read it.
"""

from __future__ import annotations

import logging
from typing import Any

from app.tasks.handlers import TranslationHandler
from engines.ct2_decode import load_ct2_decoder
from model import LoadedModel

log = logging.getLogger(__name__)


class CT2TranslationHandler(TranslationHandler):
    """TranslationHandler decoding with CTranslate2 (float32: the torch decoder's tokens and scores)."""

    def __init__(self, loaded: LoadedModel, torchscript: bool, translator_kwargs: dict[str, Any]) -> None:
        """translator_kwargs: ctranslate2.Translator's (Settings.ctranslate2_kwargs); torchscript: the torch
        model's decoding graphs, for its share of the decoding."""
        super().__init__(loaded, torchscript)
        self.engine = load_ct2_decoder(loaded, fallback=self.decoder, **translator_kwargs)  # and lone_threads
        log.info("%s: CTranslate2 %s", self.name, ", ".join(f"{k}={v}" for k, v in translator_kwargs.items()))

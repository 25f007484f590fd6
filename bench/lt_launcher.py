"""LibreTranslate as bench/vs_libretranslate.py runs it, in LibreTranslate's own Python (stdlib and
LibreTranslate only, nothing of this repo):

    LT_PYTHON bench/lt_launcher.py --host 127.0.0.1 --port P --load-only fr,en --disable-web-ui ...

Two changes before libretranslate.main.main() starts the app with these arguments:
- sentence splitting is a rule split (a break after . ! ? … and whitespace), not MiniSBD, which downloads
  an ONNX model at the first request (argostranslate 1.12 makes it the default; Stanza and spaCy too);
- no model install or update at start (libretranslate.init.boot): with fewer than two packages installed it
  fetches the package index and installs every pair, and the bench serves one package, offline.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


def rule_split(text: str) -> list[str]:
    """The sentences of one paragraph: a break after .!?… followed by whitespace."""
    return [s for s in SENTENCE_END.split(text.strip()) if s]


class RuleSentencizer:
    """argostranslate.sbd.ISentenceBoundaryDetectionModel's interface, splitting by rule."""

    def __init__(self, pkg: Any) -> None:
        self.pkg = pkg

    def split_sentences(self, text: str) -> list[str]:
        return rule_split(text)


def main() -> None:
    # run as a script, this file's folder leads sys.path, and bench/ctranslate2.py would shadow ctranslate2
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import argostranslate.translate
    import libretranslate.init
    from libretranslate.main import main as lt_main

    # PackageTranslation picks its sentencizer class from these module names, whatever ARGOS_CHUNK_TYPE says
    for name in ("MiniSBDSentencizer", "StanzaSentencizer", "SpacySentencizerSmall"):
        setattr(argostranslate.translate, name, RuleSentencizer)
    libretranslate.init.boot = lambda *args, **kwargs: None  # create_app imports it at call time
    sys.argv[0] = "libretranslate"
    lt_main()


if __name__ == "__main__":
    main()

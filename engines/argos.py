"""Argos Translate packages (what LibreTranslate serves), decoded by CTranslate2 in this project's terms.

An installed package is an unpacked `.argosmodel` zip: a directory holding metadata.json (from_code, to_code,
package_version, ...), model/ (a CTranslate2 model directory), sentencepiece.model and optionally stanza/
(sentence splitting, unused here: the service splits sentences itself) and README.md. Argos tokenizes with
the sentencepiece model and passes the pieces to `ctranslate2.Translator.translate_batch`; so does this
module, through engines.ct2_decode.CT2Decoder (no torch model: a beam search that reaches its length limit
keeps CTranslate2's unfinished hypotheses). Decoding follows the request's options (beam_size, GNMT
length_penalty, ...), not Argos' fixed ones (beam 4, CTranslate2 length_penalty 0.2, replace_unknowns).
No attention maps: CTranslate2 returns only its own alignment-layer attention, which /attention does not use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model.config import ModelConfig
from model.tokenizer import Tokenizer

if TYPE_CHECKING:
    from engines.ct2_decode import CT2Decoder

METADATA, MODEL_DIR, SENTENCEPIECE = "metadata.json", "model", "sentencepiece.model"
MAX_LEN = 1024  # source tokens: CTranslate2's default max_input_length


class ArgosPackageError(ValueError):
    """Not a usable Argos Translate translation package; the message names the file and the reason."""


class NotTranslation(ArgosPackageError):
    """A package of another kind (e.g. "sbd", sentence splitting), which argospm installs beside them."""


def is_argos_package(path: Path) -> bool:
    return (path / METADATA).is_file() and (path / MODEL_DIR).is_dir()


@dataclass(frozen=True)
class ArgosPackage:
    path: Path
    metadata: dict[str, Any]
    config: ModelConfig  # what the registry and the API read: languages, special ids, max_len

    @property
    def tokenizer_path(self) -> Path:
        return self.path / SENTENCEPIECE


def _codes(metadata: dict[str, Any], one: str, many: str) -> list[str]:
    codes = [metadata[one]] if metadata.get(one) else []
    codes += [c for c in metadata.get(many, []) if c not in codes]
    codes += [lang["code"] for lang in metadata.get("languages", []) if lang.get("code") not in codes]
    return [str(c) for c in codes]


def read_argos_package(path: Path) -> ArgosPackage:
    """Read metadata.json and the sentencepiece model (cheap: no weights). ArgosPackageError when the
    package is not a one-pair translation package with a sentencepiece model."""
    f = path / METADATA
    try:
        metadata = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArgosPackageError(f"{f}: not valid JSON ({e})") from e
    if not isinstance(metadata, dict):
        raise ArgosPackageError(f"{f}: not a JSON object")
    kind = metadata.get("type", "translate")
    if kind != "translate":
        raise NotTranslation(f"{f}: a {kind!r} package, not a translation package")
    sources, targets = _codes(metadata, "from_code", "from_codes"), _codes(metadata, "to_code", "to_codes")
    if not sources or not targets:
        raise ArgosPackageError(f"{f}: needs from_code and to_code")
    if len(targets) > 1:
        raise ArgosPackageError(
            f"{f}: translates into {targets}; one target language per package is supported"
        )
    sp = path / SENTENCEPIECE
    if not sp.is_file():
        hint = " (BPE packages are not supported)" if any(path.glob("*bpe*")) else ""
        raise ArgosPackageError(f"{sp}: missing{hint}")
    tok = Tokenizer(sp)
    ids = {"unk_id": max(tok.unk_id, 0), "eos_id": max(tok.eos_id, 0)}  # sentencepiece says -1 for "none"
    config = ModelConfig(
        task="translation",
        vocab_size=tok.vocab_size,
        max_len=MAX_LEN,
        pad_id=max(tok.pad_id, 0),
        bos_id=max(tok.bos_id, 0),
        source_langs=tuple(sources),
        target_langs=tuple(targets),
        **ids,
    )
    return ArgosPackage(path, metadata, config)


def load_argos_decoder(package: ArgosPackage, **translator_kwargs: Any) -> tuple[CT2Decoder, Tokenizer]:
    """The package's CTranslate2 model opened with `translator_kwargs` (device, compute_type, inter_threads,
    intra_threads, lone_threads: engines.ct2_decode.open_translators) and its sentencepiece tokenizer."""
    from engines.ct2_decode import (
        CT2Decoder,
        open_translators,
    )  # torch: reading a package (discovery) needs none

    translator, lone = open_translators(package.path / MODEL_DIR, **translator_kwargs)
    tokenizer = Tokenizer(package.tokenizer_path)
    return CT2Decoder(translator, tokenizer, package.config, None, lone), tokenizer

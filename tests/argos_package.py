"""An Argos Translate package built from one of our tiny checkpoints (needs ctranslate2): what the Argos tests
serve (tests/app/test_pretrained.py) and pull (tests/training/test_pull_argos.py)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

NAMES = {"en": "English", "es": "Spanish", "fr": "French", "de": "German"}


def argos_name(from_code: str, to_code: str, version: str = "1.0") -> str:
    """The folder name argospm gives a package (its zip's top directory): translate-es_en-1_0."""
    return f"translate-{from_code}_{to_code}-{version.replace('.', '_')}"


def argos_zip(checkpoint: Path, out: Path, from_code: str, to_code: str, version: str = "1.0") -> Path:
    """An .argosmodel as Argos' packaging writes it: one top directory with metadata.json, model/ (the
    CTranslate2 model), sentencepiece.model and README.md."""
    from engines.ct2_convert import export_ctranslate2

    top = argos_name(from_code, to_code, version)
    work = out.parent / "argos-build" / top
    export_ctranslate2(checkpoint, work / "model")
    shutil.copyfile(checkpoint / "tokenizer.model", work / "sentencepiece.model")
    metadata = {
        "package_version": version,
        "argos_version": "1.0",
        "from_code": from_code,
        "from_name": NAMES.get(from_code, from_code),
        "to_code": to_code,
        "to_name": NAMES.get(to_code, to_code),
        "links": [f"https://example.com/{top}.argosmodel"],
    }
    (work / "metadata.json").write_text(json.dumps(metadata, indent=4))
    (work / "README.md").write_text(f"# {from_code} -> {to_code}\nLicense: CC0 (test package)\n")
    with zipfile.ZipFile(out, "w") as z:
        for f in sorted(work.rglob("*")):
            z.write(f, f.relative_to(work.parent))
    return out

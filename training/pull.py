"""`python -m training pull ORG/NAME[@REVISION]`: a Hugging Face Hub model as a checked checkpoint of ours;
`pull argos:SRC-TGT[@VERSION]`: an Argos Translate package from its index (training.pull_argos).

  python -m training pull Helsinki-NLP/opus-mt-fr-en               # -> checkpoints/opus-mt-fr-en
  python -m training pull ORG/MODEL@v1.0 --name sentiment-xlmr --lang en fr de
  python -m training pull argos:fr-en                              # -> checkpoints/argos-fr-en
  python -m training pull --progress json argos:fr-en              # JSON lines on stdout (training.progress)

huggingface_hub downloads into its cache, at one commit, only what an importer reads: config.json and the card
(README.md) first, whose model_type picks the importer (anything else is refused before a weight is fetched),
then that commit's tokenizer files and weights (model.safetensors, else pytorch_model.bin). The import is
training.imports' checked one (staged, loaded back with the server's loader, run once), and the staged
checkpoint is compared with transformers (training.verify_import, when installed) before it is moved into
place. config.json ("training" -> "imported" -> "hub") and README.md record the repository, the commit, the
card's license and the verification's figures. Any failure: exit 1, one line, no checkpoint folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch

from training.hub_progress import hub_progress
from training.import_check import ImportFailed, check_replaceable, checkpoint_path, one_line, write_checked
from training.progress import Progress, Pulled
from training.pull_argos import PREFIX, pull_argos

# importer family -> the files it reads besides the weights (README.md: the card, for its license)
FILES = {
    "marian": ["config.json", "README.md", "source.spm", "target.spm", "vocab.json"],
    "xlm-roberta": ["config.json", "README.md", "sentencepiece.bpe.model"],
}
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first a snapshot has; never both fetched
SUPPORTED = "model_type marian (OPUS-MT), xlm-roberta or roberta *ForSequenceClassification (sentiment)"
REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # ORG/NAME, as the hub spells model repositories
DIFF = re.compile(r"largest difference (\S+) ")  # in verify_import's report lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training pull",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "spec",
        help="ORG/NAME[@REVISION] (a branch, tag or commit; default main), or argos:SRC-TGT[@VERSION] "
        "(default: the highest package_version)",
    )
    p.add_argument("--name", help="the checkpoint (and served model) name; default: NAME, or argos-SRC-TGT")
    p.add_argument("--out-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint of that name")
    p.add_argument("--lang", nargs="+", help="xlm-roberta: the languages it classifies (required)")
    p.add_argument("--source-lang", nargs="+", help="marian; default: SRC of an opus-mt name")
    p.add_argument("--target-lang", nargs="+", help="marian; default: TGT of an opus-mt name, else >>xxx<<")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="stored weights")
    p.add_argument("--no-verify", action="store_true", help="skip the comparison with transformers")
    p.add_argument(
        "--progress",
        choices=["bars", "json"],
        default="bars",
        help="json: progress as JSON lines on stdout, the rest on stderr (training.progress)",
    )
    return p


def parse_spec(spec: str) -> tuple[str, str]:
    """ORG/NAME[@REVISION] -> (repository, revision); ImportFailed on anything else."""
    repo, _, revision = spec.partition("@")
    if not REPO.fullmatch(repo) or (revision == "" and "@" in spec):
        raise ImportFailed("expected ORG/NAME[@REVISION], a Hugging Face model repository")
    return repo, revision or "main"


def family(hf: dict[str, Any]) -> str:
    """The importer for a transformers config.json; ImportFailed listing what is supported otherwise."""
    kind, archs = hf.get("model_type"), hf.get("architectures") or []
    if kind == "marian":
        return "marian"
    if kind in ("xlm-roberta", "roberta") and any(a.endswith("ForSequenceClassification") for a in archs):
        return "xlm-roberta"
    shown = f"model_type {kind!r}" + (f" ({', '.join(archs)})" if archs else "")
    raise ImportFailed(f"{shown} is not supported; pull supports {SUPPORTED}")


def hub_options() -> dict[str, Any]:
    """snapshot_download's cache, endpoint and offline switch, read from the environment now: huggingface_hub
    reads HF_HUB_CACHE, HF_ENDPOINT and HF_HUB_OFFLINE once, when first imported (HF_TOKEN it reads per call)."""
    from huggingface_hub import constants

    env = os.environ
    offline = env.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    return {
        "cache_dir": env.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE,
        "endpoint": (env.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/"),
        "local_files_only": offline or bool(constants.HF_HUB_OFFLINE),
    }


def download(
    repo: str, revision: str, patterns: list[str], hub: dict[str, Any], progress: Progress | None = None
) -> Path:
    """The snapshot folder of `repo` at `revision` (named by its commit sha) with `patterns` fetched (file
    names); under --progress json each of them in the folder ends with a download event done == total."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        folder = Path(snapshot_download(repo, revision=revision, allow_patterns=patterns, **hub))
    except GatedRepoError as e:
        raise ImportFailed(f"{repo} is gated: accept its terms on the hub, then set HF_TOKEN") from e
    except RepositoryNotFoundError as e:
        raise ImportFailed(
            f"no model repository {repo} on {hub['endpoint']} (a private one needs HF_TOKEN)"
        ) from e
    except RevisionNotFoundError as e:
        raise ImportFailed(f"{repo} has no revision {revision!r}") from e
    except LocalEntryNotFoundError as e:
        why = "HF_HUB_OFFLINE is set" if hub["local_files_only"] else f"{hub['endpoint']} cannot be reached"
        raise ImportFailed(f"{repo}@{revision} is not in the hub cache {hub['cache_dir']} and {why}") from e
    for name in patterns if progress is not None and progress.stream else []:  # cached ones have no bar
        if (folder / name).is_file():
            size = (folder / name).stat().st_size
            progress.download(name, size, size)
    return folder


def card_license(readme: Path) -> str:
    """The `license:` of the hub card's YAML front matter, else "unknown"."""
    if not readme.is_file():
        return "unknown"
    import yaml
    from huggingface_hub import metadata_load

    try:
        meta = metadata_load(readme) or {}
    except (ValueError, yaml.YAMLError):  # a card whose front matter is not a YAML mapping
        return "unknown"
    found = meta.get("license") or "unknown"
    return ", ".join(map(str, found)) if isinstance(found, list) else str(found)


def verified(kind: str, folder: Path, checkpoint: Path) -> dict[str, Any]:
    """verify_import's comparison of `checkpoint` with transformers on `folder`, its report lines echoed and
    kept; ImportFailed with the first line that differs."""
    from training.verify_import import TOLERANCE, verify

    with contextlib.redirect_stdout(io.StringIO()) as out:
        ok = verify(kind, folder, checkpoint, None)
    lines = out.getvalue().splitlines()
    for line in lines:
        print(line)
    if not ok:
        raise ImportFailed(next((x for x in lines if x.endswith("DIFFERENT")), "verification failed"))
    diffs = [float(m.group(1)) for x in lines if (m := DIFF.search(x))]
    return {
        "compared": bool(diffs),
        "largest_difference": max(diffs) if diffs else None,
        "tolerance": TOLERANCE,
        "report": lines,
    }


def record(stage: Path, name: str, hub: dict[str, Any]) -> None:
    """`hub` into the staged checkpoint (named `name`): config.json's training.imported.hub and a section
    of README.md."""
    config = json.loads((stage / "config.json").read_text())
    config["training"].setdefault("imported", {})["hub"] = hub
    (stage / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    check = hub["verification"]
    if check is None:
        figure = "not run (--no-verify)"
    elif check["compared"]:
        figure = (
            f"largest difference {check['largest_difference']:.2e} (tolerance {check['tolerance']:g}): OK"
        )
    else:
        figure = "not compared (transformers is not installed)"
    card = (stage / "README.md").read_text() if (stage / "README.md").is_file() else f"# {name}\n"
    (stage / "README.md").write_text(
        f"{card}\n## Pulled from the Hugging Face Hub\n\n"
        f"- repository: {hub['url']} at commit `{hub['revision']}` (asked for `{hub['requested']}`)\n"
        f"- license (the hub card's `license:`): {hub['license']}\n"
        f"- verification against transformers: {figure}\n"
    )


def fetch_model(
    repo: str, revision: str, lang: list[str] | None, hub: dict[str, Any], progress: Progress
) -> tuple[str, Path]:
    """The importer family of `repo` at `revision` and the snapshot folder holding what that importer reads;
    refused (ImportFailed) before a weight is fetched when no importer takes the model."""
    head = download(repo, revision, ["config.json", "README.md"], hub, progress)
    if not (head / "config.json").is_file():
        raise ImportFailed(f"{repo}@{head.name} has no config.json (not a transformers model)")
    kind = family(json.loads((head / "config.json").read_text()))
    if kind == "xlm-roberta" and not lang:
        raise ImportFailed("give --lang with the languages it classifies (its model card says which)")
    folder = download(repo, head.name, [*FILES[kind], WEIGHTS[0]], hub, progress)  # head.name: the commit
    if not (folder / WEIGHTS[0]).is_file():
        folder = download(repo, head.name, [WEIGHTS[1]], hub, progress)
    return kind, folder


def pull(args: argparse.Namespace, progress: Progress) -> Pulled:
    """Download, import, verify and record."""
    repo, revision = parse_spec(args.spec)
    out = checkpoint_path(args.out_dir, repo.split("/")[1] if args.name is None else args.name)
    check_replaceable(out, args.force)  # refused before anything is downloaded
    try:
        hub = hub_options()
    except ImportError as e:
        raise ImportFailed("huggingface_hub is not installed (pip install huggingface_hub)") from e
    names = ["config.json", "README.md", *(f for files in FILES.values() for f in files), *WEIGHTS]
    with hub_progress(progress, names) if progress.stream else contextlib.nullcontext():
        kind, folder = fetch_model(repo, revision, args.lang, hub, progress)
    progress.event("check")
    dtype = getattr(torch, args.dtype)
    info = {
        "repo": repo,
        "revision": folder.name,
        "requested": revision,
        "url": f"{hub['endpoint']}/{repo}",
        "license": card_license(folder / "README.md"),
    }

    def write(stage: Path) -> Path:
        if kind == "marian":
            from training.import_marian import import_marian

            import_marian(folder, stage, args.source_lang, args.target_lang, dtype)
        else:
            from training.import_xlmr import import_xlmr

            import_xlmr(folder, stage, args.lang, dtype)
        check = None if args.no_verify else verified(kind, folder, stage)  # on the staged checkpoint
        record(stage, out.name, {**info, "verification": check})
        return stage

    path = write_checked(out, write, args.force)
    return Pulled(path, repo, info["revision"], f"@{info['revision']} (license: {info['license']})")


def _missing_dirs(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    return [p for p in (path, *path.parents) if not p.exists()]


def cli(argv: list[str] | None = None) -> int:
    """Exit 0 written, 1 refused: one line on stderr saying why, and no checkpoint folder. --progress json:
    stdout carries only training.progress's JSON lines, the rest goes to stderr."""
    args = parser().parse_args(argv)
    made = _missing_dirs(args.out_dir.absolute())
    progress = Progress(sys.stdout if args.progress == "json" else None)
    human = sys.stderr if progress.stream else sys.stdout
    try:
        with contextlib.redirect_stdout(human):
            progress.event("resolve", spec=args.spec)
            pulled = pull_argos(args, progress) if args.spec.startswith(PREFIX) else pull(args, progress)
    except Exception as e:  # any refusal (hub, index, importer, loader, verification): one line
        for d in made:  # --out-dir as it was: write_checked creates it before the import can fail
            with contextlib.suppress(OSError):
                d.rmdir()
        print(f"error: pull {args.spec}: {one_line(e)}", file=sys.stderr)
        progress.event("error", message=one_line(e))
        return 1
    print(f"wrote {pulled.checkpoint} from {pulled.source}{pulled.note}", file=human)
    progress.event(
        "done", checkpoint=str(pulled.checkpoint.absolute()), source=pulled.source, version=pulled.version
    )
    return 0

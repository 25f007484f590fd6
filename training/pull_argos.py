"""`python -m training pull argos:SRC-TGT[@VERSION]`: an Argos Translate package from its package index, as a
model folder the server serves (engines.argos).

  python -m training pull argos:fr-en                  # -> checkpoints/argos-fr-en
  python -m training pull argos:fr-en@1.9 --name fr-en-argos

The index is argospm's, found as argostranslate finds it: ARGOS_PACKAGE_INDEX, a folder URL whose index.json
is read (default argospm-index on GitHub), or the URL of a .json file. It lists packages' metadata
(from_code, to_code, package_version, links, ...); the translation package for the pair with the highest
package_version (or VERSION) is streamed from its first http(s) link that answers into a hidden staging
folder beside the checkpoint (at most MAX_DOWNLOAD bytes, and every byte the server announced), unpacked
member by member (one top folder, only files and folders, no path out of it, at most MAX_UNPACKED bytes and
MAX_MEMBERS entries), read with the server's reader (engines.argos; its pair must be the index's), run once
by CTranslate2 when installed, given a README.md section saying where it came from, and moved into place.
Any failure: exit 1, one line, nothing written.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import io
import json
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import IO, Any
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

from engines.argos import ArgosPackage, read_argos_package
from training.import_check import ImportFailed, check_replaceable, checkpoint_path, write_checked
from training.progress import Progress, Pulled

PREFIX = "argos:"
INDEX_ENV = "ARGOS_PACKAGE_INDEX"  # argostranslate's own setting, read the same way
DEFAULT_INDEX = "https://raw.githubusercontent.com/argosopentech/argospm-index/main/"
SPEC = re.compile(r"argos:([A-Za-z]{2,8})-([A-Za-z]{2,8})(?:@([\w.+-]+))?")
MAX_INDEX = 16 << 20  # bytes; argospm's index is ~30 kB
MAX_DOWNLOAD = 2 << 30  # bytes of one .argosmodel (published ones: 60-160 MB)
MAX_UNPACKED = 4 << 30  # bytes written by the unpacking: a zip bomb stops here
MAX_MEMBERS = 10_000
CHUNK = 1 << 20
TIMEOUT = 60.0  # seconds without a byte
PROBE = "Hello, world."


def parse(spec: str) -> tuple[str, str, str | None]:
    """argos:SRC-TGT[@VERSION] -> (SRC, TGT, VERSION or None); ImportFailed on anything else."""
    m = SPEC.fullmatch(spec)
    if m is None:
        raise ImportFailed("expected argos:SRC-TGT[@VERSION], e.g. argos:fr-en (Argos language codes)")
    return m[1], m[2], m[3]


def index_url() -> str:
    url = os.environ.get(INDEX_ENV) or DEFAULT_INDEX
    return url if urlsplit(url).path.endswith(".json") else url.rstrip("/") + "/index.json"


def fetch(url: str, sink: IO[bytes], limit: int, file: str, progress: Progress) -> int:
    """Stream `url` (http or https) into `sink`; ImportFailed when it cannot, sends more than `limit` bytes,
    or ends before the bytes its Content-Length announced. Returns the bytes written."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise ImportFailed(f"{url}: only http and https URLs are read")
    try:
        response = urlopen(Request(url, headers={"User-Agent": "transformer-serving"}), timeout=TIMEOUT)
    except HTTPError as e:
        e.close()
        raise ImportFailed(f"{url}: HTTP {e.code} {e.reason}") from None
    except (OSError, ValueError) as e:  # URLError: DNS, refused connection; a timeout
        raise ImportFailed(f"cannot reach {url} ({getattr(e, 'reason', e)})") from e
    with response:
        length = response.headers.get("Content-Length", "")
        total = int(length) if length.isdigit() else None
        if total is not None and total > limit:
            raise ImportFailed(f"{url}: {total} bytes, more than the {limit} read")
        done = 0
        progress.download(file, done, total)
        try:
            while chunk := response.read(CHUNK):
                done += len(chunk)
                if done > limit:
                    raise ImportFailed(f"{url}: more than the {limit} bytes read")
                sink.write(chunk)
                progress.download(file, done, total)
        except (OSError, http.client.HTTPException) as e:
            raise ImportFailed(f"the download of {url} broke off after {done} bytes ({e})") from e
    if total is not None and done != total:  # http.client ends a short body quietly
        raise ImportFailed(f"the download of {url} ended after {done} of {total} bytes")
    progress.download(file, done, done)
    return done


def read_index(url: str, progress: Progress) -> list[dict[str, Any]]:
    """The index's entries (JSON objects); ImportFailed when it cannot be read or is not a list of them."""
    buf = io.BytesIO()
    try:
        fetch(url, buf, MAX_INDEX, "index.json", progress)
    except ImportFailed as e:
        raise ImportFailed(f"cannot read the Argos package index ({INDEX_ENV}): {e}") from e
    try:
        index = json.loads(buf.getvalue())
    except ValueError as e:
        raise ImportFailed(f"the Argos package index {url} is not JSON ({e})") from e
    if not isinstance(index, list) or not all(isinstance(x, dict) for x in index):
        raise ImportFailed(f"the Argos package index {url} is not a JSON list of packages")
    return index


def version_key(entry: dict[str, Any]) -> tuple[int, ...]:
    """package_version "1.10" -> (1, 10): compared as numbers, as argostranslate's packaging.version does."""
    return tuple(int(n) for n in re.findall(r"\d+", str(entry.get("package_version", ""))))


def choose(index: list[dict[str, Any]], src: str, tgt: str, version: str | None, url: str) -> dict[str, Any]:
    """The translation package for src -> tgt: VERSION's, else the highest package_version; ImportFailed
    listing the pairs (or the versions) the index has otherwise."""
    packages = [
        e
        for e in index
        if e.get("type", "translate") == "translate" and e.get("from_code") and e.get("to_code")
    ]
    found = [e for e in packages if (e.get("from_code"), e.get("to_code")) == (src, tgt)]
    if not found:
        pairs = sorted({f"{e['from_code']}-{e.get('to_code')}" for e in packages})
        raise ImportFailed(f"no Argos package translates {src} -> {tgt} in {url}; it has {', '.join(pairs)}")
    if version is not None:
        versions = sorted({str(e.get("package_version")) for e in found})
        found = [e for e in found if str(e.get("package_version")) == version]
        if not found:
            raise ImportFailed(f"{src}-{tgt} has no package_version {version} in {url}; it has {versions}")
    return max(found, key=version_key)


def download(entry: dict[str, Any], archive: Path, progress: Progress) -> str:
    """The package from its first http(s) link that answers, into `archive`; returns that link."""
    links = [x for x in entry.get("links") or [] if isinstance(x, str) and x.startswith(("http:", "https:"))]
    if not links:
        raise ImportFailed(f"the index gives no http(s) link for {entry.get('code') or entry['from_code']}")
    failed = []
    for link in links:
        try:
            with archive.open("wb") as f:
                fetch(link, f, MAX_DOWNLOAD, link.rsplit("/", 1)[-1], progress)
            return link
        except ImportFailed as e:
            failed.append(str(e))
    raise ImportFailed("; ".join(failed))


def members(z: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, tuple[str, ...]]]:
    """Each entry with its path inside the one top folder ((): the folder itself); ImportFailed for an entry
    that is not a plain file or folder, a path that could leave the folder, or more than one top."""
    infos = z.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ImportFailed(f"the package has {len(infos)} entries, more than {MAX_MEMBERS}")
    out, tops = [], set()
    for info in infos:
        name = info.filename
        parts = tuple(name.rstrip("/").split("/"))
        if name.startswith("/") or "\\" in name or ":" in name or any(p in ("", ".", "..") for p in parts):
            raise ImportFailed(f"the package's entry {name!r} would be written outside its folder: refused")
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if kind == stat.S_IFLNK else "not a plain file"
            raise ImportFailed(f"the package's entry {name!r} is {what}: refused")
        if len(parts) == 1 and not info.is_dir():
            raise ImportFailed(f"the package's entry {name!r} is outside its top folder")
        tops.add(parts[0])
        out.append((info, parts[1:]))
    if len(tops) != 1:
        raise ImportFailed(f"a package is one top folder; this one has {len(tops)}: {sorted(tops)[:5]}")
    return out


def unpack(archive: Path, stage: Path) -> None:
    """The top folder's contents into `stage` (created), checked by `members`, at most MAX_UNPACKED bytes."""
    try:
        z = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as e:
        raise ImportFailed(f"the package is not a zip archive, as a .argosmodel is ({e})") from e
    stage.mkdir()
    written = 0
    with z:
        for info, rel in members(z):
            path = stage.joinpath(*rel)
            if info.is_dir():
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, path.open("xb") as dst:  # "x": an entry given twice is refused
                while chunk := src.read(CHUNK):  # zipfile checks each entry's CRC at its end
                    written += len(chunk)
                    if written > MAX_UNPACKED:
                        raise ImportFailed(f"the package unpacks to more than {MAX_UNPACKED} bytes: refused")
                    dst.write(chunk)


def read_pair(stage: Path, src: str, tgt: str, link: str) -> ArgosPackage:
    """The unpacked package read as the server reads it; ImportFailed unless it translates src -> tgt."""
    package = read_argos_package(stage)
    sources, targets = package.config.source_langs, package.config.target_langs
    if src not in sources or targets != (tgt,):
        raise ImportFailed(
            f"{link} translates {'/'.join(sources)} -> {'/'.join(targets)}, not {src} -> {tgt}"
        )
    return package


def run_once(package: ArgosPackage) -> str:
    """The package's CTranslate2 model opened on the CPU and run on PROBE, as the server will; what was done."""
    from engines.argos import load_argos_decoder

    try:
        decoder, tok = load_argos_decoder(package, device="cpu", intra_threads=1)
    except ImportError:
        return "not run (ctranslate2 is not installed)"
    pieces = tok.pieces(tok.encode(PROBE))
    decoder.translator.translate_batch([pieces], beam_size=1, max_decoding_length=8)
    return "opened and run once by CTranslate2, as the server does"


def card(stage: Path, info: dict[str, Any]) -> None:
    """A section of README.md (the package's own, when it has one) recording where the package came from."""
    readme = stage / "README.md"
    text = readme.read_text(errors="replace") if readme.is_file() else f"# {stage.name}\n"
    links = "\n".join(f"  - {x}" for x in info["links"])
    readme.write_text(
        f"{text.rstrip()}\n\n## Pulled from the Argos Translate package index\n\n"
        f"- index: {info['index']}\n"
        f"- package: {info['code']} ({info['from']} -> {info['to']}), package_version {info['version']}, "
        f"argos_version {info['argos_version']}\n"
        f"- downloaded from: {info['link']} (sha256 {info['sha256']})\n- links in the index:\n{links}\n"
        f"- license (metadata.json's `license`): {info['license']}\n"
        f"- check: {info['check']}\n"
    )


def pull_argos(args: argparse.Namespace, progress: Progress) -> Pulled:
    """Find, download, unpack, check and record."""
    src, tgt, version = parse(args.spec)
    if args.lang or args.source_lang or args.target_lang:
        raise ImportFailed("--lang, --source-lang and --target-lang: an Argos package's are its metadata's")
    out = checkpoint_path(args.out_dir, f"argos-{src}-{tgt}" if args.name is None else args.name)
    check_replaceable(out, args.force)  # refused before anything is downloaded
    url = index_url()
    entry = choose(read_index(url, progress), src, tgt, version, url)

    def write(stage: Path) -> Path:
        archive = stage.parent / "package.argosmodel"  # in the hidden staging folder: removed on failure
        link = download(entry, archive, progress)
        progress.event("check")
        with archive.open("rb") as f:
            sha256 = hashlib.file_digest(f, "sha256").hexdigest()
        unpack(archive, stage)
        archive.unlink()
        package = read_pair(stage, src, tgt, link)
        meta = package.metadata
        card(
            stage,
            {
                "index": url,
                "code": entry.get("code") or f"translate-{src}_{tgt}",
                "from": src,
                "to": tgt,
                "version": meta.get("package_version", entry.get("package_version")),
                "argos_version": meta.get("argos_version", entry.get("argos_version", "unknown")),
                "link": link,
                "links": entry.get("links") or [],
                "sha256": sha256,
                "license": meta.get("license")
                or "unknown (not in metadata.json; see the package's own notes)",
                "check": run_once(package),
            },
        )
        return stage

    path = write_checked(out, write, args.force, check=read_argos_package)
    version = str(entry.get("package_version"))
    return Pulled(path, f"{PREFIX}{src}-{tgt}", version, f" package_version {version} ({url})")

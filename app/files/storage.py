"""Translated files waiting for their download (the LibreTranslate API's download_file): private and short-lived.

A file is stored under an unguessable name (secrets.token_urlsafe: 256 random bits) followed by its original
name, made safe (`<token>.<name>`, LibreTranslate's shape: the download is called <name>), for APP_FILE_TTL_S;
with APP_API_KEY on, only a request with the key that asked opens it (a SHA-256 of the key is stored with it).
Nothing lists the store: a name that is not there, has expired or is asked for with another key is the same
404. The store is a directory (APP_FILE_DIR, mode 0700) so that every HTTP process of the server
(APP_HTTP_WORKERS) finds what another stored. An expired file is removed when it is asked for, and every
expired file when a file is stored (at most every SWEEP_EVERY_S per process: a sweep reads the whole
directory); no timer: an idle server keeps what it stored last, unreadable.

Layout: <dir>/<token>.data (the bytes) and <dir>/<token>.json ({"name", "expires" (Unix time), "key"}), the
JSON written last (os.replace): a token without it is not there yet.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
import secrets
import tempfile
import time
from pathlib import Path

from app.core.private_files import key_hash, write_private

DEFAULT_DIR = Path(tempfile.gettempdir()) / "transformer-serving-files"
SWEEP_EVERY_S = 10.0
_swept: dict[Path, float] = {}  # per directory, when this process last swept it (time.monotonic())
TOKEN_BYTES = 32  # token_urlsafe: 43 characters of [A-Za-z0-9_-]
MAX_NAME_CHARS = 100
_NAME = re.compile(rf"([A-Za-z0-9_-]{{43}})\.([A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_CHARS - 1}}})")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(filename: str, extension: str) -> str:
    """An uploaded file's name reduced to [A-Za-z0-9._-] (no path, no leading dot), ending in `extension`."""
    stem = _UNSAFE.sub("_", Path(filename.replace("\\", "/")).name).strip("._-")
    stem = stem[: MAX_NAME_CHARS - len(extension)]
    if not stem.lower().endswith(extension):
        stem = (stem.removesuffix(stem[stem.rfind(".") :]) if "." in stem else stem) or "file"
        stem = stem[: MAX_NAME_CHARS - len(extension)] + extension
    return stem


def well_formed(stored: str) -> bool:
    """Whether `stored` is a name this store makes (<token>.<safe name>): anything else is never looked up."""
    return _NAME.fullmatch(stored) is not None


class FileStore:
    def __init__(self, root: Path | None, ttl_s: float) -> None:
        self.root, self.ttl_s = root or DEFAULT_DIR, ttl_s

    def put(self, data: bytes, name: str, key: str | None) -> str:
        """Store `data` (called `name`, already safe) for APP_FILE_TTL_S; its download name `<token>.<name>`."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if time.monotonic() - _swept.get(self.root, -SWEEP_EVERY_S) >= min(SWEEP_EVERY_S, self.ttl_s):
            _swept[self.root] = time.monotonic()
            self.sweep()
        token = secrets.token_urlsafe(TOKEN_BYTES)
        write_private(self.root / f"{token}.data", data)
        meta = {"name": name, "expires": time.time() + self.ttl_s, "key": key_hash(key)}
        write_private(self.root / f"{token}.json", json.dumps(meta).encode())
        return f"{token}.{name}"

    def get(self, stored: str, key: str | None) -> tuple[bytes, str] | None:
        """(bytes, download name) of a stored name asked for with `key`; None when there is no such file for
        this key (never stored, expired, another key)."""
        if (m := _NAME.fullmatch(stored)) is None:
            return None
        token, name = m.groups()
        try:
            meta = json.loads((self.root / f"{token}.json").read_bytes())
        except (OSError, ValueError):
            return None
        if meta["expires"] <= time.time():
            self._remove(token)
            return None
        sent = key_hash(key) or ""
        if meta["name"] != name or (meta["key"] is not None and not hmac.compare_digest(meta["key"], sent)):
            return None
        try:
            return (self.root / f"{token}.data").read_bytes(), name
        except OSError:  # removed since (expired, swept by another process)
            return None

    def sweep(self) -> None:
        """Remove every expired file (and the data of a file whose JSON never came: a crash mid-put)."""
        now = time.time()
        with contextlib.suppress(FileNotFoundError):
            for path in self.root.iterdir():
                token, _, kind = path.name.partition(".")
                try:
                    expired = kind == "json" and json.loads(path.read_bytes())["expires"] <= now
                    orphan = kind == "data" and not path.with_suffix(".json").exists()
                    if expired or (orphan and path.stat().st_mtime < now - 60):  # a put's JSON comes next
                        self._remove(token)
                except (OSError, ValueError, KeyError, TypeError):
                    continue

    def _remove(self, token: str) -> None:
        for kind in ("json", "data"):
            with contextlib.suppress(FileNotFoundError):
                (self.root / f"{token}.{kind}").unlink()

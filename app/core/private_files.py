"""Files that one user's processes share and no one else reads: written at once (a temporary file renamed),
mode 0600, owned by the hash of the API key that made them (never the key itself)."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path


def key_hash(key: str | None) -> str | None:
    """A SHA-256 of the key (None without one): what a stored file keeps to know its owner."""
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()


def write_private(path: Path, data: bytes) -> None:
    """`data` at `path` at once (a temporary file renamed: a reader sees the old file or the new one),
    readable by this user only."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)

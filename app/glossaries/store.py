"""Stored glossaries: one JSON file each in APP_GLOSSARY_DIR, a directory (mode 0700) every HTTP process shares,
kept across restarts when it is a volume.

A glossary's id is unguessable (secrets.token_urlsafe: 256 random bits); its file keeps the SHA-256 of the API
key that made it (None without APP_API_KEY), and only that key sees it: with another key (or none) it is not
there (404), as the file store does (app/files/storage.py). The store holds at most APP_MAX_GLOSSARIES (all
keys together; two processes creating the last one at once may both succeed). A file is written at once (a
temporary file renamed): a reader sees a whole glossary or none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core.errors import NotFound, invalid
from app.core.private_files import key_hash, write_private
from app.core.settings import Settings

DEFAULT_DIR = Path(tempfile.gettempdir()) / "transformer-serving-glossaries"
TOKEN_BYTES = 32  # token_urlsafe: 43 characters of [A-Za-z0-9_-]
_ID = re.compile(r"[A-Za-z0-9_-]{43}")
FIELD = "glossary_id"  # what a request's 422 names


class StoreFull(Exception):
    """The store holds APP_MAX_GLOSSARIES glossaries (a 409 at the routes)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the store holds {limit} glossaries (APP_MAX_GLOSSARIES): delete one first")


@dataclass(frozen=True)
class StoredGlossary:
    glossary_id: str
    name: str
    source_lang: str  # lowercase codes
    target_lang: str
    entries: dict[str, str]
    creation_time: str  # ISO 8601, UTC
    owner: str | None  # key_hash of the API key that made it

    def info(self) -> dict[str, Any]:
        """The metadata the routes answer (no entries, no owner)."""
        keep = ("glossary_id", "name", "source_lang", "target_lang", "creation_time")
        return {k: getattr(self, k) for k in keep} | {"entry_count": len(self.entries)}

    def check_pair(self, source: str, target: str) -> None:
        """422 unless the request translates this glossary's pair (a source "auto": its target only; the
        source is checked per text after detection, check_detected)."""
        if target.lower() != self.target_lang or source.lower() not in (self.source_lang, "auto"):
            raise invalid(
                (FIELD,), f"the glossary is for {self._pair}, not {source.lower()} -> {target.lower()}"
            )

    def check_detected(self, langs: Sequence[str | None], translated: Sequence[int], field: str) -> None:
        """422 unless each translated text (index into langs) was detected in the glossary's source_lang."""
        for i in translated:
            if langs[i] != self.source_lang:
                where = f"{field}[{i}]" if field == "texts" else field
                raise invalid(
                    (FIELD,),
                    f"the glossary is for {self._pair}, and {where} is detected as {langs[i]}: give "
                    "source_lang, or a glossary of its language",
                )

    @property
    def _pair(self) -> str:
        return f"{self.source_lang} -> {self.target_lang}"


class GlossaryStore:
    def __init__(self, root: Path | None, key: str | None, max_count: int) -> None:
        self.root, self.owner, self.max_count = root or DEFAULT_DIR, key_hash(key), max_count

    @classmethod
    def of(cls, settings: Settings) -> GlossaryStore:
        """The store of APP_GLOSSARY_DIR, as seen with APP_API_KEY (the gate has checked the request's)."""
        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        return cls(settings.glossary_dir, key, settings.max_glossaries)

    def create(self, name: str, source: str, target: str, entries: dict[str, str]) -> StoredGlossary:
        """Store a glossary (entries already checked); StoreFull past APP_MAX_GLOSSARIES."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if sum(1 for p in self.root.glob("*.json") if _ID.fullmatch(p.stem)) >= self.max_count:
            raise StoreFull(self.max_count)
        made = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        g = StoredGlossary(
            secrets.token_urlsafe(TOKEN_BYTES),
            name,
            source.lower(),
            target.lower(),
            entries,
            made,
            self.owner,
        )
        write_private(self.root / f"{g.glossary_id}.json", json.dumps(asdict(g)).encode())
        return g

    def get(self, glossary_id: str) -> StoredGlossary | None:
        """The glossary of this key with this id; None when there is none (never made, deleted, another
        key's, not an id this store makes)."""
        if _ID.fullmatch(glossary_id) is None:
            return None
        try:
            g = StoredGlossary(**json.loads((self.root / f"{glossary_id}.json").read_bytes()))
        except (OSError, ValueError, TypeError):
            return None
        return g if hmac.compare_digest(g.owner or "", self.owner or "") else None

    def owned(self) -> list[StoredGlossary]:
        """This key's glossaries, oldest first."""
        if not self.root.is_dir():
            return []
        found = [g for p in self.root.glob("*.json") if (g := self.get(p.stem)) is not None]
        return sorted(found, key=lambda g: (g.creation_time, g.glossary_id))

    def delete(self, glossary_id: str) -> bool:
        """Whether this key's glossary was there (and is now gone)."""
        if self.get(glossary_id) is None:
            return False
        with contextlib.suppress(FileNotFoundError):  # deleted by another process meanwhile
            (self.root / f"{glossary_id}.json").unlink()
        return True


async def stored_glossary(settings: Settings, glossary_id: str, source: str, target: str) -> StoredGlossary:
    """A request's glossary_id: the stored glossary, checked against the request's languages.

    Raises:
        NotFound: no such glossary for this key (404).
        RequestValidationError: another language pair (422).
    """
    g = await asyncio.to_thread(GlossaryStore.of(settings).get, glossary_id)
    if g is None:
        raise NotFound(f"glossary_id: no glossary {glossary_id[:50]!r} (for this API key)")
    g.check_pair(source, target)
    return g

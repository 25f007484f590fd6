"""What a request, a batch and a model's queues may hold: the admission limits (422, 429, 413, 504) and the
bounds on a batch."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings

from app.core.settings.base import ENV_PREFIX
from app.schemas import MAX_TEXTS


class LimitSettings(BaseSettings):
    """A group of Settings (app/core/settings/__init__.py), which reads it from the environment."""

    max_batch_size: int = Field(
        default=32, ge=1, le=1024
    )  # items (texts/sentences) per forward; 1 = no batching
    max_batch_delay_ms: float = Field(
        default=5.0, ge=0, le=10_000
    )  # while a batch of its key runs or every worker is busy: the longest a partial batch waits for more
    max_queue: int = Field(default=1024, ge=1)  # items waiting per model (all its queues) before 429
    # work units (app/batching/batcher.py: tokens through a model; a translated sentence: its source tokens +
    # beam_size x its output length limit): one request's budget (422 above), what may wait per model
    # (429 above), and the most one translation or attention batch takes (a bound on its duration)
    max_work: int = Field(default=50_000, ge=1)
    max_queue_work: int = Field(default=200_000, ge=1)  # after max_work: _holds_a_request reads it
    max_batch_work: int = Field(default=8_192, ge=1)
    max_decode_queues: int = Field(default=64, ge=1)  # live translation queues (model, target, beam size)
    request_timeout_s: float = Field(default=30.0, gt=0)  # 504 past this deadline
    max_texts: int = Field(default=64, ge=1, le=MAX_TEXTS)  # texts per request (the schema's hard cap)
    max_chars: int = Field(default=2000, ge=1)  # characters per text
    max_glossary_terms: int = Field(default=100, ge=0)  # glossary terms per request (model/glossary.py)
    max_term_chars: int = Field(default=100, ge=1)  # characters per glossary term, source or target
    max_body_bytes: int = Field(default=1_048_576, ge=1024)  # request body size; 413 above
    # file translation (app/files/): an uploaded file's size (413 above; its route's body may hold it and the
    # form around it), how long a translated file waits for its download, and where (shared by the HTTP
    # processes; None: <temp dir>/transformer-serving-files)
    max_file_bytes: int = Field(default=5_242_880, ge=1024)
    file_ttl_s: float = Field(default=600.0, gt=0)
    file_dir: Path | None = None
    # stored glossaries (app/glossaries/): how many the store holds (all keys together), and where (shared by
    # the HTTP processes, kept across restarts when it is a volume; None: <temp dir>/transformer-serving-glossaries)
    max_glossaries: int = Field(default=1000, ge=0)
    glossary_dir: Path | None = None

    @field_validator("max_queue_work")
    @classmethod
    def _holds_a_request(cls, v: int, info: ValidationInfo) -> int:
        if (budget := info.data.get("max_work")) is not None and v < budget:
            raise ValueError(f"must be at least APP_MAX_WORK ({budget}): a request within budget must fit")
        return v

    def split_limits_error(self, processes: int) -> str | None:
        """Why the admission limits cannot be shared out between `processes` model processes (each takes
        its floor/ceil share of APP_MAX_QUEUE, APP_MAX_QUEUE_WORK and APP_MAX_DECODE_QUEUES), if they cannot:
        each share must hold one request within APP_MAX_WORK, and one item and one decoding queue."""
        if processes <= 1:
            return None
        p = f"{ENV_PREFIX}MODEL_PROCESSES={processes}"
        if (work := self.max_queue_work // processes) < self.max_work:
            return (
                f"{p} shares {ENV_PREFIX}MAX_QUEUE_WORK={self.max_queue_work:,} out in parts of {work:,} "
                f"work units, below {ENV_PREFIX}MAX_WORK={self.max_work:,}: a request within budget could "
                f"never be admitted; set {ENV_PREFIX}MAX_QUEUE_WORK to at least {processes * self.max_work:,} "
                "or run fewer model processes"
            )
        for name, value in (("MAX_QUEUE", self.max_queue), ("MAX_DECODE_QUEUES", self.max_decode_queues)):
            if value < processes:
                return f"{p} needs {ENV_PREFIX}{name} of at least {processes} (one per model process), got {value}"
        return None

"""X-Request-ID: one id per request, held in a contextvar while the request is served.

app.edge.gate.Gate takes the id from the request when it is sane (else makes one), sets `CURRENT` for the request
and puts the id on its answer. Log records carry it (app.core.logs.RequestIdFilter); a batch, which mixes requests,
logs under the ids of its requests, and records on each request which model ran it and in how large a batch
(the access line's `model` and `batch_size`): app/batching/batcher.py.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class RequestInfo:
    """One request (or, in a batch's context, the requests of the batch: `id` is then their ids)."""

    id: str
    client: str = ""  # who sent it (the client address): the batch queues share their turns between clients
    models: list[str] = field(default_factory=list)  # the models whose batches ran its items, in order
    batch_size: int = 0  # the largest batch its items ran in

    def ran(self, model: str, batch_size: int) -> None:
        """One of its items ran in a batch of `batch_size` items of `model` (called on the event loop)."""
        if model not in self.models:
            self.models.append(model)
        self.batch_size = max(self.batch_size, batch_size)


CURRENT: ContextVar[RequestInfo | None] = ContextVar("request", default=None)


def current_id() -> str | None:
    info = CURRENT.get()
    return info.id if info is not None else None

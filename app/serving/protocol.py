"""What the routes call, whichever process answers: app.serving.service.Service (the models in this process) or
app.parallel.remote.RemoteService (an HTTP process, the models in model processes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from app.batching.wait import Disconnected
from app.core.metrics import Metrics
from app.core.settings import Settings
from app.schemas import ManagedModel, ModelInfo, Readiness, StoredModel
from app.text.langid import Detection, LanguageDetector

if TYPE_CHECKING:
    from app.management.control import Action
    from app.registry import Registry


class Serving(Protocol):
    """What the routes call: the two services above implement it."""

    settings: Settings
    metrics: Metrics

    @property
    def registry(self) -> Registry | None: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def detector(self) -> LanguageDetector | None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def answer(self, task: str, req: Any, disconnected: Disconnected = None, **options: Any) -> Any: ...

    async def detect(self, texts: Sequence[str], field: str = "texts") -> list[list[Detection]]: ...

    async def metrics_text(self) -> bytes: ...

    def readiness(self) -> Readiness: ...

    def models(self) -> list[ModelInfo]: ...

    async def manage(self, action: Action, name: str) -> ManagedModel:
        """Load, reload (a new version swapped in) or unload a model in every process (app/management/)."""
        ...

    async def stored_models(self) -> list[StoredModel]:
        """The checkpoint directory's model folders, served or not."""
        ...

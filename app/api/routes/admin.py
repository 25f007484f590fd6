"""The admin API: models managed while serving, as Triton's model control and TorchServe's management API
(app/management/). APP_ADMIN_API_KEY alone opens it (app.edge.gate.Gate); without it set, it answers 403."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path

from app.api.deps import ServiceDep
from app.api.routes.common import ErrorBody
from app.edge.api_key import ADMIN_KEY
from app.schemas import ManagedModel, StoredModels

NAME = Path(
    description="The model's folder in the checkpoint directory (e.g. opus-mt-fr-en).", max_length=100
)
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Without APP_ADMIN_API_KEY (APP_API_KEY does not open it)"},
    403: {"model": ErrorBody, "description": "The admin API is off: APP_ADMIN_API_KEY is not set"},
    404: {
        "model": ErrorBody,
        "description": "No such model folder, or (unload, reload) the model is not served",
    },
    409: {"model": ErrorBody, "description": "A load of a model served, or another change of it under way"},
    422: {"model": ErrorBody, "description": "It cannot be loaded (why); the version served before goes on"},
    503: {"model": ErrorBody, "description": "Still loading at start, or a model process is restarting"},
}
router = APIRouter(prefix="/admin", tags=["admin"], dependencies=ADMIN_KEY, responses=ERRORS)


@router.get("/models", response_model=StoredModels)
async def stored(service: ServiceDep) -> StoredModels:
    """Every model folder of the checkpoint directory, served or not: its state, its version on disk and the
    version served (they differ once a pull has replaced its files: reload it)."""
    return StoredModels(models=await service.stored_models())


@router.post("/models/{name}/load", response_model=ManagedModel)
async def load(service: ServiceDep, name: str = NAME) -> ManagedModel:
    """Load a model folder that is not served (one pulled or imported while serving, one unloaded, or one
    that failed) in every process; its routes (language pairs, languages) are served once it is ready."""
    return await service.manage("load", name)


@router.post("/models/{name}/reload", response_model=ManagedModel)
async def reload(service: ServiceDep, name: str = NAME) -> ManagedModel:
    """Serve the model's folder as it is now: the new version is loaded beside the old, then swapped in
    atomically (requests in flight finish on the old weights, new ones get the new); nothing to do when its
    files have not changed; a load that fails leaves the old version serving and says why."""
    return await service.manage("reload", name)


@router.post("/models/{name}/unload", response_model=ManagedModel)
async def unload(service: ServiceDep, name: str = NAME) -> ManagedModel:
    """Serve the model no more: its requests in flight finish, new ones get 404; its memory is freed. Its
    folder stays (load it again, or remove it)."""
    return await service.manage("unload", name)

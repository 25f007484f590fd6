"""Health, readiness, the model list and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import ServiceDep
from app.api.routes.common import ERRORS
from app.core.metrics import METRICS_PATH
from app.edge.api_key import API_KEY
from app.schemas import Health, ModelsResponse, Readiness

open_router = APIRouter(tags=["system"])
router = APIRouter(tags=["system"], dependencies=API_KEY)


@open_router.get("/health", response_model=Health)
async def health() -> Health:
    """Liveness: 200 while the process is alive."""
    return Health()


@open_router.get("/ready", response_model=Readiness, responses={503: {"model": Readiness}})
async def ready(service: ServiceDep) -> JSONResponse:
    """200 once every model is loaded and warmed up; 503 with the reason before, and while shutting down."""
    state = service.readiness()
    return JSONResponse(
        state.model_dump(exclude_none=True), status_code=200 if state.status == "ready" else 503
    )


# HEAD: some load balancers probe with it (the status is the answer; not in the OpenAPI schema, where a
# second method on one function would repeat its operation id)
@open_router.head("/health", include_in_schema=False)
async def health_head() -> Response:
    return Response()


@open_router.head("/ready", include_in_schema=False)
async def ready_head(service: ServiceDep) -> Response:
    return Response(status_code=200 if service.readiness().status == "ready" else 503)


@router.get("/models", response_model=ModelsResponse, responses={401: ERRORS[401]})
async def models(service: ServiceDep) -> ModelsResponse:
    """Every served model: task, languages, labels, size, dtype, device, checksum, metrics."""
    return ModelsResponse(models=service.models())


@router.get(
    METRICS_PATH,
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, 401: ERRORS[401]},
)
async def metrics(service: ServiceDep) -> Response:
    """Prometheus text format. With APP_API_KEY set it also takes APP_METRICS_API_KEY; APP_METRICS_PUBLIC=true
    leaves it open."""
    return Response(await service.metrics_text(), media_type=CONTENT_TYPE_LATEST)

"""Service settings from the environment (prefix APP_), validated once at start-up.

Settings is one flat class (settings.port, settings.batch_limits(...)) put together from groups, each in its
own module: server (the HTTP edge), limits (requests, batches, queues), processes (devices, processes,
workers), engines (models and engines); machine holds the probes and constants the auto sizes come from.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from app.core.settings.base import ENV_PREFIX, REPO_ROOT, SettingsError
from app.core.settings.engines import EngineSettings
from app.core.settings.limits import LimitSettings
from app.core.settings.machine import (
    CHEAP_LANE_HOLD_S,
    CORES_PER_MODEL_PROCESS,
    CUDA_BATCH,
    CUDA_WORKERS,
    MANY_CORES,
    MAX_AUTO_HTTP_WORKERS,
    MAX_AUTO_INFERENCE_WORKERS,
    MAX_AUTO_MODEL_PROCESSES,
    cpu_workers,
    torch_gpu_build,
    usable_cores,
)
from app.core.settings.processes import ProcessSettings
from app.core.settings.server import ServerSettings

__all__ = [
    "CHEAP_LANE_HOLD_S",
    "CORES_PER_MODEL_PROCESS",
    "CUDA_BATCH",
    "CUDA_WORKERS",
    "ENV_PREFIX",
    "MANY_CORES",
    "MAX_AUTO_HTTP_WORKERS",
    "MAX_AUTO_INFERENCE_WORKERS",
    "MAX_AUTO_MODEL_PROCESSES",
    "REPO_ROOT",
    "EngineSettings",
    "LimitSettings",
    "ProcessSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "cpu_workers",
    "load_settings",
    "torch_gpu_build",
    "usable_cores",
]


class Settings(ServerSettings, LimitSettings, ProcessSettings, EngineSettings):
    """Every group's fields, validators and methods, read from the APP_ environment variables. A group's
    methods that need another group's fields name them under TYPE_CHECKING (for mypy alone): here they meet."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)


def load_settings() -> Settings:
    """Settings from the environment; a SettingsError naming every invalid APP_ variable otherwise."""
    try:
        return Settings()
    except ValidationError as e:
        lines = []
        for err in e.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            got = (
                ""
                if field in ("api_key", "metrics_api_key", "admin_api_key")
                else f" (got {err.get('input')!r})"
            )
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"{ENV_PREFIX}{field.upper()} ({field}): {msg}{got}")
        raise SettingsError("invalid settings: " + "; ".join(lines)) from None  # one log line

"""python -m app: one uvicorn worker (the batcher lives in the process) on APP_HOST:APP_PORT, with the
connection limits of app/edge/connections.py (the image, compose and Kubernetes all run this). With
APP_HTTP_WORKERS or APP_MODEL_PROCESSES > 1: HTTP processes and model processes (app/parallel/)."""

from __future__ import annotations

import logging
import os
import sys

import uvicorn

from app.core.logs import configure_logging
from app.core.settings import SettingsError, load_settings
from app.edge.server_options import raise_fd_limit, server_options
from app.registry import Registry
from app.tasks import routing
from app.tasks.served import default_tasks
from model import CheckpointError

log = logging.getLogger("app")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:  # the lifespan checks all this again; here it gives a one-line error instead of a traceback
        settings = load_settings()
        # APP_LOG_FORMAT, APP_LOG_LEVEL, the request id on every record: for uvicorn's loggers too
        configure_logging(settings.log_format, settings.log_level)
        # an unavailable APP_DEVICE fails here; torch is imported only where a GPU may serve and the NVIDIA
        # driver cannot count them (the model processes import it themselves: they start that much sooner)
        settings.device_type()
        root, empty_ok = settings.check_checkpoint_dir(), bool(settings.models)
        registry = Registry.discover(root, None, None, allow_empty=empty_ok)  # every config, no weights
        routing.languages(default_tasks(), settings, registry)  # APP_ROUTES names a translator of its pair
        raise_fd_limit(settings.max_connections)
        # before torch or ctranslate2 loads, here or in the processes started from here
        for name, value in settings.openmp_env().items():
            os.environ.setdefault(name, value)
        model_processes = settings.model_processes_count()
        if error := settings.split_limits_error(model_processes):
            raise SettingsError(error)
    except (SettingsError, CheckpointError) as e:
        log.error("%s", e)
        return 2
    http_workers = settings.http_workers_count()
    if http_workers > 1 or model_processes > 1:  # app/parallel/: HTTP processes + model processes
        from app.parallel.supervisor import run

        return run(settings, http_workers, model_processes)
    from app.main import create_app

    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        workers=1,
        log_level=settings.log_level,
        log_config=None,  # configured above
        access_log=False,  # the gate writes the access line (APP_ACCESS_LOG), with the request id
        **server_options(settings, app.state.service.metrics),  # timeouts, head limits, cap, shutdown
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m app: one uvicorn worker (the batcher lives in the process) on APP_HOST:APP_PORT."""

from __future__ import annotations

import logging
import sys

import uvicorn

from app.registry import Registry
from app.settings import SettingsError, load_settings
from model import CheckpointError

log = logging.getLogger("app")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:  # the lifespan checks all this again; here it gives a one-line error instead of a traceback
        settings = load_settings()
        device = settings.torch_device()
        Registry.discover(settings.check_checkpoint_dir(), device, settings.torch_dtype(device))
    except (SettingsError, CheckpointError) as e:
        log.error("%s", e)
        return 2
    logging.getLogger().setLevel(settings.log_level.upper())
    from app.main import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        workers=1,
        log_level=settings.log_level,
        access_log=settings.access_log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One HTTP process: the whole app (limits, auth, parsing, validation, JSON, language detection) on the
listening socket it shares with the others, with a RemoteService for the model processes' Services.

python -m app.parallel.http FD SOCKET_PATH HTTP_WORKERS [SOCKET_PATH...]   (started by app.parallel.supervisor;
one socket per model process)
"""

from __future__ import annotations

import socket
import sys

import uvicorn

from app.core.heap import freeze_startup
from app.core.logs import configure_logging
from app.core.metrics import Metrics, pid_once
from app.core.settings import Settings, load_settings
from app.edge.server_options import raise_fd_limit, server_options
from app.main import create_app
from app.parallel.lifeline import die_with_parent
from app.parallel.remote import RemoteService
from app.tasks.attention import AttentionTask
from app.tasks.attention_png import MAX_PNG_REQUESTS


def share(settings: Settings, http_workers: int) -> Settings:
    """This process's part of the server-wide limits: APP_MAX_CONNECTIONS split across the processes."""
    per_process = max(8, -(-settings.max_connections // http_workers))
    return settings.model_copy(update={"max_connections": per_process})


def main(argv: list[str]) -> int:
    fd, paths, http_workers = int(argv[0]), [argv[1], *argv[3:]], int(argv[2])
    settings = share(load_settings(), http_workers)
    configure_logging(settings.log_format, settings.log_level)
    die_with_parent()
    raise_fd_limit(settings.max_connections)
    pid_once()  # it never forks
    service = RemoteService(settings, Metrics(), paths)
    if AttentionTask.name in service.tasks:  # its part of the PNG requests at once (its renderer draws them)
        service.task(AttentionTask).png.limit = max(1, MAX_PNG_REQUESTS // http_workers)
    app = create_app(settings, service)
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        log_config=None,  # configured above
        access_log=False,  # the gate writes the access line (APP_ACCESS_LOG)
        **server_options(settings, service.metrics),
    )
    freeze_startup()  # app/core/heap.py: the imports and the app, out of the collector's full passes
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=fd)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

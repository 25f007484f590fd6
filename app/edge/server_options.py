"""How python -m app runs uvicorn: the connection settings as uvicorn options, and room for the connections'
file descriptors (one process, and each HTTP process of app/parallel/)."""

from __future__ import annotations

import resource
from typing import Any

from app.core.metrics import Metrics
from app.core.settings import ENV_PREFIX, Settings, SettingsError
from app.edge.connections import ConnectionLimits, protocol_class, refusal_slots

FD_RESERVE = 256  # descriptors besides client sockets: checkpoints, pipes, threads' files, the listener


def server_options(settings: Settings, metrics: Metrics | None = None) -> dict[str, Any]:
    """uvicorn.run keyword arguments that apply the connection settings (cuts counted in `metrics`)."""
    return {
        "http": protocol_class(ConnectionLimits.from_settings(settings), metrics),
        "ws": "none",  # no websocket routes: an Upgrade must not move a connection out of these limits
        "timeout_keep_alive": settings.keepalive_timeout_s,
        "timeout_graceful_shutdown": settings.shutdown_timeout_s,
    }


def raise_fd_limit(max_connections: int) -> int:
    """Make room for max_connections client sockets: raise the soft RLIMIT_NOFILE towards the hard one if
    needed -> the soft limit. SettingsError if the hard limit is too low."""
    need = max_connections + refusal_slots(max_connections) + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise SettingsError(
                f"{ENV_PREFIX}MAX_CONNECTIONS={max_connections} needs {need} file descriptors, but the limit "
                f"is {hard} (ulimit -Hn): lower {ENV_PREFIX}MAX_CONNECTIONS or raise the limit"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        soft = need
    return soft

"""The tasks' routing seen from the shared machinery: each task's table (Task.routing: a route, such as a
language pair, -> the model that answers it) and the languages it serves, whatever the task."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.core.settings import ENV_PREFIX, Settings
from app.tasks.task import Task

if TYPE_CHECKING:
    from app.registry import Registry

log = logging.getLogger(__name__)


def languages(tasks: Iterable[Task], settings: Settings, registry: Registry) -> list[str]:
    """Every language a text may be in, for any task (what the language detector ranks). Building the tables
    checks the routing settings: a SettingsError here fails start-up."""
    return sorted({lang for task in tasks for lang in task.languages(settings, registry)})


def tables(tasks: Iterable[Task], settings: Settings, registry: Registry) -> dict[str, str]:
    """Every task's routing table, its routes prefixed by its task ("translation fr-en")."""
    return {f"{t.name} {route}": m for t in tasks for route, m in t.routing(settings, registry).items()}


def fail(tasks: Iterable[Task], settings: Settings, registry: Registry, name: str, reason: str) -> None:
    """Record that model `name` failed to load. APP_STRICT_READINESS: its routes stay its own (503 saying
    why); else the tasks route around it, which is logged once, as an error, with where its routes go."""
    reroute = not settings.strict_readiness
    tasks = list(tasks)
    before = tables(tasks, settings, registry) if reroute else {}
    registry.fail(name, reason, reroute)
    if not reroute:
        return
    after = tables(tasks, settings, registry)
    moved = [
        f"{route.split(' ', 1)[1]} -> {after.get(route, 'none')}" for route, m in before.items() if m == name
    ]
    log.error(
        "model %s failed to load (%s); %sSTRICT_READINESS=false: the others serve%s",
        name,
        reason,
        ENV_PREFIX,
        f"; its pairs now go to: {', '.join(moved)}" if moved else "",
    )

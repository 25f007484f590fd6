"""The tasks a server serves by default; a server made with others (tests, embedders) passes its own list."""

from __future__ import annotations

from app.tasks.attention import AttentionTask
from app.tasks.sentiment import SentimentTask
from app.tasks.task import Task
from app.tasks.translation import TranslationTask

SERVED: tuple[type[Task], ...] = (SentimentTask, TranslationTask, AttentionTask)


def default_tasks() -> list[Task]:
    """A fresh object of each task (each holds its handlers of one server)."""
    return [task() for task in SERVED]

"""A request's texts spread over the models (so the batchers) that serve them, and their outputs gathered
back in request order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

R = TypeVar("R")


def group_by_model(models: Iterable[str]) -> dict[str, list[int]]:
    """Model -> the indices of its texts, models in first-appearance order."""
    groups: dict[str, list[int]] = {}
    for i, model in enumerate(models):
        groups.setdefault(model, []).append(i)
    return groups


def scatter(groups: dict[str, list[int]], outputs: list[list[R]]) -> list[tuple[str, R]]:
    """Per text, in request order: its model and its output (`outputs`: per group, one per text)."""
    placed: list[Any] = [None] * sum(map(len, groups.values()))
    for (name, idxs), outs in zip(groups.items(), outputs, strict=True):
        for i, out in zip(idxs, outs, strict=True):
            placed[i] = (name, out)
    return placed

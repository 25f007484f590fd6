"""torch.jit.script for the library's scripted functions (why TorchScript: see model.inference.ClassifierGraph)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)


def script(fn: F) -> F:
    """torch.jit.script(fn) without its deprecation notice. TorchScript reads no global ints: a scripted
    function takes its constants as arguments."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated")
        return torch.jit.script(fn)  # type: ignore[no-any-return]

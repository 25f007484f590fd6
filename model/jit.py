"""One place for tracing models into TorchScript graphs (the classifier batch, the translator's encode and step).

torch.jit.trace is deprecated upstream and warns; its TracerWarnings flag Python-side decisions that a graph
bakes in. `tracing()` silences the deprecation notice and the warnings a caller names as checked, turns any
other TracerWarning into an error, and lets one trace run at a time: warnings.catch_warnings() swaps
process-wide filters, and torch.jit's type cache is shared (a server loads its models on several threads).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

WARNINGS_LOCK = threading.Lock()  # held by whoever swaps the process-wide warning filters


@contextmanager
def tracing(*expected: str) -> Iterator[None]:
    """Context for torch.jit.trace/script calls; `expected`: regexes of TracerWarnings known to be harmless."""
    with WARNINGS_LOCK, warnings.catch_warnings(), torch.inference_mode():
        warnings.filterwarnings("error", category=torch.jit.TracerWarning)  # later filters take precedence
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.(trace|script).* is deprecated")
        for message in expected:
            warnings.filterwarnings("ignore", message=message)
        yield

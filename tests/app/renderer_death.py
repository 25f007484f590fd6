"""A heatmap_grid that kills the renderer process drawing it (tests/app/test_png_renderer.py).

A module of its own that imports the standard library only: the spawned renderer unpickles the function by
importing its module, and a test module's imports (the app, torch) would cost each new renderer seconds,
where the real renderer imports numpy and matplotlib only."""

from __future__ import annotations

import os
import signal
from typing import Any


def die(*args: Any) -> bytes:
    """Killed while drawing (SIGKILL, as the kernel's out-of-memory killer would)."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")

"""The OS name of a Python thread: `top -H`, py-spy and /proc/PID/task/TID/comm then tell the inference
workers, the channel's I/O threads and the event loop apart (bench/ceiling.py reads each one's CPU by it).
Python 3.11 sets no OS name of its own; this is Linux's prctl(PR_SET_NAME), 15 bytes at most, and nothing
elsewhere."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

PR_SET_NAME = 15
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None


def name_os_thread() -> None:
    """Give the calling thread its Python name (threading.Thread(name=...)) as its OS name."""
    if _libc is not None:
        _libc.prctl(PR_SET_NAME, threading.current_thread().name.encode()[:15], 0, 0, 0)

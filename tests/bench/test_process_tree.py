"""bench.scale.process_tree walks /proc while processes come and go: one that exits mid-walk is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scale import process_tree


def test_process_tree_lists_a_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert process_tree(os.getpid())[0] == os.getpid()
        assert child.pid in process_tree(os.getpid())
    finally:
        child.communicate(b"")


def test_process_tree_skips_a_process_gone_mid_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race seen in CI: /proc/PID/task/TID/children listed by the glob, gone when read."""
    read_text = Path.read_text

    def vanished(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "children":
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", vanished)
    assert process_tree(os.getpid()) == [os.getpid()]

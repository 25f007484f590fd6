"""bench.pinned: the measured process is found under its server by its module, and the table sums the rounds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.pinned import Served, children, measured, table


def test_the_process_of_a_role_is_found_among_the_servers_children() -> None:
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    kids = [subprocess.Popen([*sleep, name]) for name in ("app.parallel.http", "app.parallel.engine")]
    try:
        assert set(children(os.getpid())) >= {k.pid for k in kids}
        assert measured(os.getpid(), "http") == kids[0].pid
        assert measured(os.getpid(), "model") == kids[1].pid
    finally:
        for k in kids:
            k.kill()
            k.wait()
    with pytest.raises(RuntimeError, match="0 processes"):
        measured(os.getpid(), "http")


def test_the_table_gives_each_checkouts_median_and_range() -> None:
    served = Served("/a (abc1234)", "http://x", 1, us=[150.0, 140.0, 170.0], rps=[5000.0, 5200.0, 4000.0])
    assert table([served], "http").splitlines()[-1] == "| /a (abc1234) | http | 150.0 (140.0–170.0) | 5,000 |"

"""bench.pinned: the measured process is found under its server by its module, and the table sums the rounds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from bench.pinned import Served, children, measured, table

# a stand-in server: a process whose two children carry the modules' names in their command lines
ROOT = """
import subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
kids = [subprocess.Popen([*sleep, name]) for name in ("app.parallel.http", "app.parallel.engine")]
print(*(k.pid for k in kids), flush=True)
time.sleep(60)
"""


def test_the_process_of_a_role_is_found_among_the_servers_children() -> None:
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None
        http, engine = map(int, root.stdout.readline().split())
        assert set(children(root.pid)) == {http, engine}
        assert measured(root.pid, "http") == http
        assert measured(root.pid, "model") == engine
    finally:
        for pid in children(root.pid):
            os.kill(pid, signal.SIGKILL)
        root.kill()
        root.communicate()
    with pytest.raises(RuntimeError, match="0 processes"):  # it has gone, with its children
        measured(root.pid, "model")


def test_the_table_gives_each_checkouts_median_and_range() -> None:
    served = Served("/a (abc1234)", "http://x", 1, us=[150.0, 140.0, 170.0], rps=[5000.0, 5200.0, 4000.0])
    assert table([served], "http").splitlines()[-1] == "| /a (abc1234) | http | 150.0 (140.0–170.0) | 5,000 |"

"""The counters of HTTP processes that have gone, kept and added to every scrape, as prometheus-client's
multiprocess mode keeps dead processes' values: the server's counters never go backwards when an HTTP
process dies and is restarted (Prometheus would read a fall as a reset and count the survivors' totals again).

An HTTP process keeps its values in files that outlive it (prometheus-client's multiprocess mode: the
supervisor sets PROMETHEUS_MULTIPROC_DIR for the HTTP processes only). When it has gone, the model process
reads its counters and histograms from them, up to its last request, adds them to what it keeps and removes
the files. Counters that a collector reads at scrape time (process CPU seconds, garbage collections) have no
file: the values of the process's last scrape are kept instead.
"""

from __future__ import annotations

import glob
import os

from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from app.core.metrics import NAMESPACE
from app.parallel.merge import merge

KEPT = ("counter_", "histogram_")  # a gone process's gauges (its memory, `processes`) are not the server's


class Departed:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.kept: list[Metric] = []  # every gone HTTP process's counters and histograms, summed

    def add(self, pid: int, last_scrape: list[Metric] | None) -> None:
        """HTTP process `pid` has gone (its files hold its final values); `last_scrape`: its families when
        last asked (None: never)."""
        files = glob.glob(os.path.join(self.directory, f"*_{pid}.db"))
        theirs = list(MultiProcessCollector.merge([f for f in files if os.path.basename(f).startswith(KEPT)]))
        if last_scrape:
            theirs += [
                f for f in last_scrape if f.type == "counter" and not f.name.startswith(f"{NAMESPACE}_")
            ]
        self.kept = merge([self.kept, theirs])
        for path in files:
            os.remove(path)

    def families(self) -> list[Metric]:
        return self.kept

"""app.core.metrics.pid_once: in multiprocess mode the values stop asking for the pid at each update, and
still write under this process's pid, where the scrape reads them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os
from prometheus_client import values
from app.core.metrics import Metrics, pid_once
calls = []
# prometheus_client's own class, its os.getpid counted (the default is bound when the module loads)
values.ValueClass = values.MultiProcessValue(lambda: calls.append(1) or os.getpid())
pid_once()
metrics = Metrics()
calls.clear()
for _ in range(3):
    metrics.observe_request("/sentiment", "POST", 200, 0.002)
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
registry = CollectorRegistry()
MultiProcessCollector(registry)
total = registry.get_sample_value(
    "transformer_serving_http_requests_total", {"method": "POST", "route": "/sentiment", "status": "200"}
)
files = sorted(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
print(len(calls), total, all(f.endswith(f"_{os.getpid()}.db") for f in files))
"""


def test_values_read_the_pid_once(tmp_path: Path) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert out.stdout.split() == ["0", "3.0", "True"]

"""One /metrics scrape for all processes: the metric families of each process's registry, summed sample by
sample (same name and labels), rendered in the Prometheus text format.

Counters, histograms and most gauges add up (requests, CPU seconds, memory, queue depth); a few gauges do not:
start times and `_created` take the earliest, info gauges (1 with labels) and limits the largest, and so do
the model counts: every model process loads the same models, so the server has as many as one of them has
(several model processes report what one process would: 4 models, not 4 per model process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from app.core.metrics import NAMESPACE

METRICS_TIMEOUT_S = 2.0  # the model process's wait for an HTTP process's families, in a scrape
EARLIEST = ("process_start_time_seconds",)
LARGEST = ("process_max_fds", "python_info", f"{NAMESPACE}_models_loaded", f"{NAMESPACE}_models_failed")


def count_process(registry: CollectorRegistry, role: str) -> None:
    """processes{role} = 1 in this process's registry: summed, the scrape counts the processes it covers."""
    gauge = Gauge(
        "processes",
        "Processes serving, by role (http, model)",
        ["role"],
        namespace=NAMESPACE,
        registry=registry,
    )
    gauge.labels(role=role).set(1)


def _combine(name: str) -> Callable[[float, float], float]:
    if name.endswith("_created") or name in EARLIEST:
        return min
    if name.endswith("_info") or name in LARGEST:
        return max
    return lambda a, b: a + b


def merge(processes: Iterable[list[Metric]]) -> list[Metric]:
    """The families of every process, one per name, their samples combined (order: first seen)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for process in processes:
        for family in process:
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            samples = values[family.name]
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                old = samples.get(key)
                samples[key] = s.value if old is None else _combine(s.name)(old, s.value)
    for name, family in families.items():
        family.samples = [Sample(n, dict(labels), v) for (n, labels), v in values[name].items()]
    return list(families.values())


class _Families:
    """A collector yielding fixed families (generate_latest renders a registry)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]
    return generate_latest(registry)

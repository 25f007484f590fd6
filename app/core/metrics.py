"""Prometheus metrics in a registry per app instance (app.edge.gate.Gate counts and times the requests).

Ours are named under NAMESPACE (`transformer_serving_http_requests_total`, ...); the process and Python
collectors of prometheus_client keep their standard unprefixed names (process_cpu_seconds_total,
process_resident_memory_bytes, process_open_fds, python_gc_*, python_info), as every Prometheus client
library exports them and the usual dashboards and alerts expect (the scrape's job label tells the services
apart).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

NAMESPACE = "transformer_serving"
METRICS_PATH = "/metrics"

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def pid_once() -> None:
    """In prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR: app/parallel's HTTP processes),
    each value's every inc and observe asks the kernel for the pid (getpid, a system call: about a dozen a
    request), to start new files after a fork. A process that never forks after start can read it once: call
    this before its first metric."""
    if getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue(
            process_identifier=itertools.repeat(os.getpid()).__next__
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # CPU seconds, RSS, open fds, start time (Linux /proc)
        PlatformCollector(registry=r)  # python_info
        GCCollector(registry=r)  # collections per generation
        own: dict[str, Any] = {"namespace": NAMESPACE, "registry": r}  # transformer_serving_*, here
        self.build = Gauge(
            "build_info",
            "1, labelled with what this process serves with",
            ["version", "torch", "python", "device", "dtype", "quantize"],
            **own,
        )
        http = ["route", "method", "status"]
        self.requests = Counter("http_requests", "HTTP requests by route, method and status", http, **own)
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency by route, method and status",
            http,
            buckets=LATENCY_BUCKETS,
            **own,
        )
        self.batch_size = Histogram(
            "batch_size", "Items per forward pass, per model", ["model"], buckets=BATCH_BUCKETS, **own
        )
        self.inference = Histogram(
            "inference_duration_seconds",
            "Time of one batched forward pass (with its pre/post-processing), per model",
            ["model"],
            buckets=LATENCY_BUCKETS,
            **own,
        )
        # per model, summed over its queues (one per decoding mode): read when scraped (watch_queues), so the
        # series stay one per model whatever decoding options clients send, and enqueueing costs nothing here
        self.queue_depth = Gauge(
            "queue_depth",
            "Items waiting for a model: in its queues (all its decoding modes) or in batches waiting for a worker",
            ["model"],
            **own,
        )
        self.models_loaded = Gauge("models_loaded", "Models loaded and warmed up", **own)
        # 1 per model process serving the version (summed across processes: how many serve it)
        self.model_version = Gauge(
            "model_version",
            "The version each model process serves: its files' fingerprint, and the hub revision it was pulled at",
            ["model", "version", "revision"],
            **own,
        )
        self.models_failed = Gauge(
            "models_failed", "Models that failed to load (1), with the reason", ["model", "reason"], **own
        )
        # work for nobody: computed for a request that had left, or a decoding stopped because all had left
        self.abandoned = Counter(
            "abandoned_items",
            "Items computed after their request had left (timed out or disconnected), per model",
            ["model"],
            **own,
        )
        self.stopped = Counter(
            "stopped_items",
            "Items whose decoding stopped between two steps because every request of the batch had left",
            ["model"],
            **own,
        )
        self.connections_cut = Counter(
            "connections_cut",
            "Connections answered or closed by the connection limits (app/edge/connections.py), by reason",
            ["reason"],
            **own,
        )
        # labels() costs a lock and a tuple build per call: the children are cached per label values
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def set_build_info(self, version: str, device: str, dtype: str, quantize: str) -> None:
        """build_info{...} = 1 (set at start-up, once the device and dtype are resolved; where the models are:
        an HTTP process never imports torch)."""
        import torch

        self.build.clear()
        python = ".".join(map(str, sys.version_info[:3]))
        self.build.labels(version, torch.__version__, python, device, dtype, quantize).set(1)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        children = self._request_children.get(key)
        if children is None:
            labels = (route, method, str(status))
            children = self._request_children[key] = (
                self.requests.labels(*labels),
                self.latency.labels(*labels),
            )
        children[0].inc()
        children[1].observe(seconds)

    def batch_histograms(self, model: str) -> tuple[Any, Any]:
        """`model`'s children of batch_size and inference_duration_seconds: a batcher labels them once and
        observes each of its batches on them (`.observe(value)`)."""
        return self.batch_size.labels(model=model), self.inference.labels(model=model)

    def observe_dropped(self, model: str, *, abandoned: int = 0, stopped: int = 0) -> None:
        if abandoned:
            self.abandoned.labels(model=model).inc(abandoned)
        if stopped:
            self.stopped.labels(model=model).inc(stopped)

    def serve_version(self, model: str, version: str, revision: str | None) -> None:
        """model_version{model, version, revision} = 1, the model's other versions' series gone."""
        _drop(self.model_version, model)
        self.model_version.labels(model, version, revision or "").set(1)

    def clear_failure(self, model: str) -> None:
        _drop(self.models_failed, model)

    def forget_model(self, model: str) -> None:
        """An unloaded model's series: gone from the scrapes (its counters stay)."""
        for gauge in (self.model_version, self.models_failed, self.queue_depth):
            _drop(gauge, model)

    def watch_queues(self, model: str, depth: Callable[[], int]) -> None:
        """queue_depth{model} is depth() at each scrape (called on the event loop, by GET /metrics)."""
        self.queue_depth.labels(model=model).set_function(depth)


def _drop(gauge: Gauge, model: str) -> None:
    """Remove every series of `gauge` whose first label is `model`."""
    for labels in [k for k in list(gauge._metrics) if k[0] == model]:  # noqa: SLF001 (no public listing)
        gauge.remove(*labels)

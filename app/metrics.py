"""Prometheus metrics in a registry per app instance (app.gate.Gate counts and times the requests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "http_requests",
            "HTTP requests by route, method and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency by route, method and status",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "batch_size", "Items per forward pass, per model", ["model"], buckets=BATCH_BUCKETS, registry=r
        )
        self.inference = Histogram(
            "inference_duration_seconds",
            "Time of one batched forward pass (with its pre/post-processing), per model",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # per model, summed over its queues (one per decoding mode): read when scraped (watch_queues), so the
        # series stay one per model whatever decoding options clients send, and enqueueing costs nothing here
        self.queue_depth = Gauge(
            "queue_depth",
            "Items waiting for a model: in its queues (all its decoding modes) or in batches waiting for a worker",
            ["model"],
            registry=r,
        )
        self.models_loaded = Gauge("models_loaded", "Models loaded and warmed up", registry=r)
        # work for nobody: computed for a request that had left, or a decoding stopped because all had left
        self.abandoned = Counter(
            "abandoned_items",
            "Items computed after their request had left (timed out or disconnected), per model",
            ["model"],
            registry=r,
        )
        self.stopped = Counter(
            "stopped_items",
            "Items whose decoding stopped between two steps because every request of the batch had left",
            ["model"],
            registry=r,
        )
        # labels() costs a lock and a tuple build per call: the children are cached per label values
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._batch_children: dict[str, tuple[Any, Any]] = {}

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

    def observe_batch(self, model: str, size: int, seconds: float) -> None:
        children = self._batch_children.get(model)
        if children is None:
            children = self._batch_children[model] = (
                self.batch_size.labels(model=model),
                self.inference.labels(model=model),
            )
        children[0].observe(size)
        children[1].observe(seconds)

    def observe_dropped(self, model: str, *, abandoned: int = 0, stopped: int = 0) -> None:
        if abandoned:
            self.abandoned.labels(model=model).inc(abandoned)
        if stopped:
            self.stopped.labels(model=model).inc(stopped)

    def watch_queues(self, model: str, depth: Callable[[], int]) -> None:
        """queue_depth{model} is depth() at each scrape (called on the event loop, by GET /metrics)."""
        self.queue_depth.labels(model=model).set_function(depth)

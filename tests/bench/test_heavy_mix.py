"""bench/heavy_mix.py: how it reads the counters from /metrics."""

from __future__ import annotations

from app.core.metrics import Metrics
from bench.heavy_mix import counters


def test_counters_sum_over_models_and_tell_a_missing_metric() -> None:
    from prometheus_client import generate_latest

    m = Metrics()
    assert counters(generate_latest(m.registry).decode(), "abandoned_items_total") == 0
    m.observe_dropped("a", abandoned=2)
    m.observe_dropped("b", abandoned=3, stopped=1)
    text = generate_latest(m.registry).decode()
    assert counters(text, "abandoned_items_total") == 5
    assert counters(text, "stopped_items_total") == 1
    assert counters(text, "no_such_total") is None

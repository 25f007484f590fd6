"""bench/heavy_mix.py: the heavy request it sends, and how it reads the counters from /metrics."""

from __future__ import annotations

from app.core.metrics import Metrics
from app.text.sentences import split_sentences
from bench.heavy_mix import counters, heavy_body


def test_the_heavy_request_is_64_texts_of_16_sentences_at_beam_16() -> None:
    body = heavy_body()
    assert body["beam_size"] == 16
    texts = body["texts"]
    assert isinstance(texts, list)
    assert len(texts) == 64
    assert all(sum(len(line) for line in split_sentences(t, "fr")) == 16 for t in texts)


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

"""bench.scale's rows on a 16-core CPU box: the defaults (several model processes), one model process, model
processes of 2 cores each, and the plain replicas pinned to 2 cores each that issue 36 compares with."""

from __future__ import annotations

import os

import pytest
import torch

import app.core.settings.machine
from bench.scale import env_rows, setups


def test_a_16_core_box_gets_the_issue_36_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.core.settings.machine, "usable_cores", lambda: 16)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(16)))
    rows = {row.name: row for row in setups(16, cuda=False, baseline=None)}
    assert "defaults (4 HTTP processes, 4 model processes)" in rows
    assert rows["1 model process"].env == {"APP_MODEL_PROCESSES": "1"}
    assert rows["APP_MODEL_PROCESSES=6"].env == {"APP_MODEL_PROCESSES": "6", "APP_MAX_QUEUE_WORK": "300000"}
    plain = rows["8 plain replica(s) x 2 cores (CPU)"]
    assert plain.replicas == 8
    assert plain.pins == [f"{i},{i + 1}" for i in range(0, 16, 2)]
    assert plain.env == {"APP_HTTP_WORKERS": "1", "APP_MODEL_PROCESSES": "1", "APP_DEVICE": "cpu"}


def test_env_rows_are_the_defaults_with_those_settings() -> None:
    rows = env_rows(["APP_MODEL_PROCESSES=2", "APP_X=1 APP_Y=a=b", "APP_MODEL_PROCESSES=2"])
    assert [(r.name, r.env) for r in rows] == [
        ("APP_MODEL_PROCESSES=2", {"APP_MODEL_PROCESSES": "2"}),  # once
        ("APP_X=1 APP_Y=a=b", {"APP_X": "1", "APP_Y": "a=b"}),
    ]
    with pytest.raises(ValueError, match=r"NAME=VALUE settings, got \['APP_X', '=1'\]"):
        env_rows(["APP_X", "=1"])

"""bench.ceiling's parts: threads told apart by their OS names, the routes' bodies, the bare app's answer."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import httpx
import pytest

from app.core.threads import name_os_thread
from bench import ceiling
from bench.ceiling import ROUTES, alone_us, bare_app, bodies, thread_kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [("inference_3", "inference"), ("channel-read", "I/O"), ("channel-write", "I/O"), ("graphs", "other")],
)
def test_a_named_thread_is_told_apart(name: str, kind: str) -> None:
    seen: list[str] = []
    named, done = threading.Event(), threading.Event()

    def run() -> None:
        name_os_thread()
        seen.append(str(threading.get_native_id()))
        named.set()
        done.wait(10)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    try:
        assert named.wait(10)
        [tid] = seen
        with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
            assert f.read().strip() == name[:15]
        assert thread_kind(os.getpid(), int(tid)) == kind
    finally:
        done.set()
        thread.join()
    assert thread_kind(os.getpid(), os.getpid()) == "loop"


def test_each_route_sends_its_items_per_request() -> None:
    for route, (path, items) in ROUTES.items():
        sent = bodies(route)
        assert len({str(b) for b in sent}) >= 25  # distinct requests, sent round-robin
        if path == "/sentiment":
            assert all(len(b.get("texts", [b.get("text")])) == items for b in sent)
        else:
            assert {b["beam_size"] for b in sent} == {1 if route.endswith("greedy") else 4}


@pytest.mark.anyio
async def test_the_bare_app_answers_a_fixed_json() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=bare_app), base_url="http://t") as client:
        r = await client.post("/sentiment", json={"text": "anything"})
    assert (r.status_code, r.json()) == (200, {"label": "positive", "score": 0.9})


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_model_alone_costs_cpu_per_item(two_models_dir: Path, route: str) -> None:
    """The "model alone" column: the same model, inputs and engine as served, timed in this process."""
    assert 0 < alone_us(two_models_dir, route) < 1e6


def test_profiles_are_skipped_without_py_spy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """py-spy is not a dependency: without it a --profile run goes on, unprofiled, and says so."""
    monkeypatch.setattr(ceiling.shutil, "which", lambda name: None)
    monkeypatch.setattr(ceiling.sys, "executable", str(tmp_path / "bin" / "python"))
    assert ceiling.profile(os.getpid(), 1, tmp_path / "cell") == []
    assert "no py-spy" in capsys.readouterr().out

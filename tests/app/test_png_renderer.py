"""A PNG renderer process that dies (issue 29, item 4): the PNGs it had are drawn again by a new process; if
that one dies too, 503 with Retry-After, never a 500."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.serving.service import Service
from app.tasks import attention_png
from app.tasks.heatmap import ORPHAN_CHECK_S
from tests.app.conftest import eventually, serve
from tests.app.renderer_death import die

pytestmark = pytest.mark.anyio
BODY = {"model": "sentiment-en", "text": "good", "format": "png"}


async def test_pngs_in_flight_when_the_renderer_is_killed_are_drawn_by_a_new_one(
    sentiment_only_dir: Path,
) -> None:
    async with serve(Settings(checkpoint_dir=sentiment_only_dir)) as (app, client):
        service: Service = app.state.service
        pool = service.tasks["attention"].png.executor()
        loop = asyncio.get_running_loop()
        pid = await loop.run_in_executor(pool, os.getpid)
        busy = loop.run_in_executor(pool, time.sleep, 30)  # the renderer is busy: the PNGs wait in its queue
        requests = [asyncio.ensure_future(client.post("/attention", json=BODY)) for _ in range(3)]
        await eventually(lambda: len(pool._pending_work_items) == 1 + 3)  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)
        answers = [await r for r in requests]
        assert [(r.status_code, r.headers["content-type"]) for r in answers] == [(200, "image/png")] * 3
        assert service.tasks["attention"].png.executor() is not pool
        with pytest.raises(attention_png.BrokenProcessPool):
            await busy


async def test_a_renderer_that_dies_again_gives_503_with_retry_after(
    sentiment_only_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attention_png, "heatmap_grid", die)
    async with serve(Settings(checkpoint_dir=sentiment_only_dir)) as (_, client):
        r = await client.post("/attention", json=BODY)
        assert r.status_code == 503, r.text
        assert "renderer process died" in r.json()["detail"]
        assert int(r.headers["retry-after"]) >= 1
        monkeypatch.undo()
        r = await client.post("/attention", json=BODY)  # a new renderer for the next request
        assert r.status_code == 200


# A server process: starts the renderer, says both pids, then waits to be killed.
SERVER = """
import os, sys, time
from app.tasks.attention_png import PngRenderer
pool = PngRenderer().executor()
print(pool.submit(os.getpid).result(), flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_renderer_process_ends_when_its_server_is_killed() -> None:
    """A server killed outright (SIGKILL, the OOM killer) shuts nothing down: its renderer, which waits for
    work on a pipe it holds both ends of, must see its parent gone and end, not outlive it."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=repo, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with proc.stdout:
        renderer = int(proc.stdout.readline())  # the renderer inherits this pipe: read, then closed here
    assert alive(renderer)
    proc.kill()
    proc.wait()
    end = time.monotonic() + 10 * ORPHAN_CHECK_S
    while alive(renderer):  # a wait for a state: the renderer's end
        assert time.monotonic() < end, f"the renderer (pid {renderer}) outlived its killed server"
        time.sleep(0.01)

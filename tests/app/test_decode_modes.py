"""Many decoding modes at once (issue 29, item 2): length penalty, length limit and n-best count are per
sentence inside one batch, so translation queues are keyed by (model, target language, beam size) only and
clients with distinct modes cannot hold every queue (APP_MAX_DECODE_QUEUES) against the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from app.core.settings import Settings
from app.serving.service import Service
from tests.app.conftest import serve

pytestmark = pytest.mark.anyio
TEXT = "Le chat dort. Il lit."


@pytest.mark.slow  # 16 clients looping until 40 more requests are answered: not in `make test-fast`
async def test_clients_with_distinct_modes_do_not_lock_others_out(app_checkpoint_dir: Path) -> None:
    """The issue's 64 modes at 64 queues, scaled down: 16 looping clients, each with its own (beam_size,
    length_penalty), at APP_MAX_DECODE_QUEUES=8; LibreTranslate and native beam-5 requests beside them."""
    settings = Settings(checkpoint_dir=app_checkpoint_dir, max_decode_queues=8)
    async with serve(settings) as (app, client):
        stop = asyncio.Event()
        mode_statuses: list[int] = []

        async def mode_client(i: int) -> None:
            body = {"text": TEXT, "source_lang": "fr", "beam_size": 1 + i % 2, "length_penalty": 0.05 * i}
            while not stop.is_set():
                mode_statuses.append(status := (await client.post("/translate", json=body)).status_code)
                if status != 200:  # a client's pause before it retries (Retry-After is 1 s)
                    await asyncio.sleep(0.05)

        async def others() -> tuple[list[int], list[int]]:
            lt, native = [], []
            for _ in range(20):
                r = await client.post(
                    "/libretranslate/translate", json={"q": TEXT, "source": "fr", "target": "en"}
                )
                lt.append(r.status_code)
                body = {"text": TEXT, "source_lang": "fr", "beam_size": 5, "length_penalty": 0.35}
                native.append((await client.post("/translate", json=body)).status_code)
            return lt, native

        modes = [asyncio.ensure_future(mode_client(i)) for i in range(16)]
        try:
            while len(mode_statuses) < 16:  # every mode has been served or refused once
                await asyncio.sleep(0.001)
            lt, native = await others()
        finally:
            stop.set()
            await asyncio.gather(*modes)
        service: Service = app.state.service
        queues = service.queues.pool.count("translation")
    assert lt.count(200) >= 0.9 * len(lt), lt
    assert native.count(200) >= 0.9 * len(native), native
    assert mode_statuses.count(200) >= 0.9 * len(mode_statuses)
    assert queues <= 4  # fr-en at beam 1, 2, 4 (LibreTranslate's), 5


async def test_mixed_modes_in_one_batch_answer_as_each_alone(client: httpx.AsyncClient) -> None:
    """Per-sentence options within one queue: concurrent requests of one beam size with distinct length
    penalties, limits and n-best counts get what each gets alone."""
    bodies = [
        {"text": TEXT, "source_lang": "fr", "beam_size": 3, "length_penalty": lp, "max_length": ml,
         "num_hypotheses": n, "return_scores": True}
        for lp, ml, n in [(0.0, None, 1), (0.6, 3, 2), (2.0, 6, 3), (1.0, None, 2)]
    ]  # fmt: skip
    alone = [(await client.post("/translate", json=b)).json() for b in bodies]
    together = await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))
    for r, expected in zip(together, alone, strict=True):
        got = r.json()["results"][0]
        want = expected["results"][0]
        assert got["translation"] == want["translation"]
        assert got["score"] == pytest.approx(want["score"], abs=1e-4)
        assert [h["translation"] for h in got.get("hypotheses") or []] == [
            h["translation"] for h in want.get("hypotheses") or []
        ]

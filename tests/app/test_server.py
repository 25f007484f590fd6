"""Against a real `python -m app` subprocess on 127.0.0.1: start-up, every route over TCP, concurrency, SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.settings import REPO_ROOT
from bench.server import free_port, server_cmd, server_env, stop, wait_ready

pytestmark = pytest.mark.slow  # starts python -m app: not in `make test-fast`


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd, env=server_env(env), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.fixture(scope="module")
def server(app_checkpoint_dir: Path) -> Iterator[str]:
    port = free_port()
    cmd = server_cmd(port)
    proc = start(cmd, {"APP_CHECKPOINT_DIR": str(app_checkpoint_dir), "APP_MAX_BATCH_DELAY_MS": "20"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url)
        yield url
    finally:
        stop(proc)


def test_routes_over_tcp(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/ready").json()["status"] == "ready"
        assert len(c.get("/models").json()["models"]) == 4
        r = c.post("/sentiment", json={"texts": ["a dog", "정말 좋았어요"]})
        assert [x["model"] for x in r.json()["results"]] == ["sentiment-en", "sentiment-ko"]
        r = c.post(
            "/translate", json={"text": "Le chat dort. Il lit.", "source_lang": "fr", "num_hypotheses": 2}
        )
        assert len(r.json()["results"][0]["hypotheses"]) == 2
        r = c.post("/attention?format=png", json={"model": "translate-fr-en", "text": "Le chat"})
        assert r.headers["content-type"] == "image/png"
        assert c.post("/translate", json={"text": "hola", "source_lang": "es"}).status_code == 404
        assert c.post("/sentiment", json={"text": ""}).status_code == 422
        assert (
            c.post("/sentiment", content=b"{", headers={"content-type": "application/json"}).status_code
            == 422
        )
        assert 'route="/sentiment",status="200"' in c.get("/metrics").text


def raw_status(url: str, request: bytes) -> int:
    """The status of the answer to `request` sent as raw bytes (headers httpx would not send as they are)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)
        return int(s.makefile("rb").readline().split()[1])


def test_a_transfer_coding_other_than_chunked_is_501_over_tcp(server: str) -> None:
    """httptools (uvicorn's default parser) takes `gzip, chunked`, de-chunks and hands on the gzip body."""
    body = b'{"text": "a good film"}'
    head = b"POST /sentiment HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    assert raw_status(server, head + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked) == 501
    assert raw_status(server, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked) == 200


def test_concurrent_clients_over_tcp_get_their_own_results(server: str) -> None:
    texts = [f"the cat likes music {'very much ' * (i % 7)}{i}" for i in range(64)]

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server, timeout=30) as c:
            single = [await c.post("/sentiment", json={"text": t}) for t in texts[:8]]
            batched = await asyncio.gather(*(c.post("/sentiment", json={"text": t}) for t in texts))
            return single + list(batched)

    responses = asyncio.run(run())
    assert all(r.status_code == 200 for r in responses)
    single, batched = responses[:8], responses[8:]
    for a, b in zip(single, batched[:8], strict=True):
        assert a.json()["results"][0]["label"] == b.json()["results"][0]["label"]
        pa, pb = a.json()["results"][0]["probabilities"], b.json()["results"][0]["probabilities"]
        assert list(pa.values()) == pytest.approx(list(pb.values()), abs=1e-5)


def test_python_m_app_with_api_key_and_graceful_sigterm(app_checkpoint_dir: Path) -> None:
    port = free_port()
    env = {"APP_CHECKPOINT_DIR": str(app_checkpoint_dir), "APP_PORT": str(port), "APP_API_KEY": "k3y"}
    proc = start([sys.executable, "-m", "app"], env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url)
        assert httpx.post(f"{url}/sentiment", json={"text": "a"}).status_code == 401
        r = httpx.post(f"{url}/sentiment", json={"text": "a"}, headers={"Authorization": "Bearer k3y"})
        assert r.status_code == 200
        for value in (b"Bearer  k3y", b"Bearer k3y  "):  # 1*SP; trailing whitespace (httptools keeps it)
            get = b"GET /models HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nConnection: close\r\n\r\n" % value
            assert raw_status(url, get) == 200, value
    finally:
        output = stop(proc)
    assert proc.returncode in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal after a clean stop
    assert "Application shutdown complete" in output
    assert "k3y" not in output

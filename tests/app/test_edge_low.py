"""Issue 29's low items: a half-closed client still gets its answer (a real `python -m app`), trailing-slash
requests are not redirected to their Host, APP_ALLOWED_HOSTS, and an OpenAPI schema that refuses what the
server refuses and documents its 401 and 413 answers. Issue 33's: two Host headers are a 400."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.settings import Settings
from app.text.blank import READ_PATTERN
from tests.app.conftest import serve
from tests.app.test_connections import Server, read_until_closed, run_server


@pytest.fixture(scope="module")
def server(sentiment_only_dir: Path) -> Iterator[Server]:
    with run_server(sentiment_only_dir, APP_ANSWER_HALF_CLOSED="true") as s:
        yield s


def test_a_half_closed_client_gets_its_answer(server: Server) -> None:
    """APP_ANSWER_HALF_CLOSED (off by default: there, end of input is a client that left, whose work stops;
    tests/app/test_parallel.py pins that on a real server)."""
    body = b'{"text": "a good film"}'
    with server.connect() as sock:
        sock.sendall(
            b"POST /sentiment HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        sock.shutdown(socket.SHUT_WR)  # done sending; still reading
        data, _ = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 200 "), data
    assert b'"label"' in data


@pytest.mark.anyio
async def test_a_trailing_slash_is_not_redirected_to_the_request_host(client: httpx.AsyncClient) -> None:
    r = await client.post("/sentiment/", json={"text": "good"}, headers={"host": "evil.example"})
    assert r.status_code == 404
    assert "evil.example" not in r.headers.get("location", "")


@pytest.mark.anyio
async def test_allowed_hosts_refuse_other_hosts_but_not_probes(app_checkpoint_dir: Path) -> None:
    settings = Settings(checkpoint_dir=app_checkpoint_dir, allowed_hosts="api.example.com,*.internal")
    async with serve(settings) as (_, client):
        body = {"text": "good"}
        for host, status in [("api.example.com", 200), ("API.example.com:8000", 200), ("a.b.internal", 200)]:
            r = await client.post("/sentiment", json=body, headers={"host": host})
            assert r.status_code == status, (host, r.text)
        r = await client.post("/sentiment", json=body, headers={"host": "rebound.attacker.example"})
        assert r.status_code == 400
        assert "APP_ALLOWED_HOSTS" in r.json()["detail"]
        for path in ("/health", "/ready"):  # a Kubernetes probe sends the pod's IP
            assert (await client.get(path, headers={"host": "10.1.2.3:8000"})).status_code == 200


@pytest.mark.anyio
async def test_openapi_refuses_what_the_server_refuses_and_lists_401_and_413(
    client: httpx.AsyncClient,
) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for name in ("SentimentRequest", "TranslateRequest", "DetectRequest"):
        text = next(t for t in schemas[name]["properties"]["text"]["anyOf"] if t.get("type") == "string")
        # {"text": ""} is refused, and a text of characters no model reads
        assert (text["minLength"], text["pattern"]) == (1, READ_PATTERN), name
        assert [b["required"] for b in schemas[name]["oneOf"]] == [["text"], ["texts"]], name
    paths = spec["paths"]
    assert "401" in paths["/models"]["get"]["responses"]
    assert "401" in paths["/metrics"]["get"]["responses"]
    for route in ("translate", "detect"):
        assert "413" in paths[f"/libretranslate/{route}"]["post"]["responses"]
    assert (await client.post("/sentiment", json={"text": ""})).status_code == 422


def test_two_host_headers_are_a_400_over_tcp(server: Server) -> None:
    """Issue 33: a request with two Host headers is refused (RFC 9112 3.2: a request-smuggling signal), with
    no APP_ALLOWED_HOSTS; one Host, any name, is served."""
    body = b'{"text": "a good film"}'
    cases = [
        (b"Host: a\r\n", b"200"),
        (b"Host: a\r\nHost: b\r\n", b"400"),
        (b"Host: a\r\nhost: a\r\n", b"400"),
        (b"Host: a, b\r\n", b"400"),  # issue 43: a list is no one host
        (b"", b"400"),  # issue 43: HTTP/1.1 with no Host at all
    ]
    for hosts, status in cases:
        with server.connect() as sock:
            sock.sendall(
                b"POST /sentiment HTTP/1.1\r\n%sContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (hosts, len(body), body)
            )
            data, _ = read_until_closed(sock)
        assert data.startswith(b"HTTP/1.1 %s " % status), (hosts, data)
        if status == b"400":
            assert b"Host" in data.split(b"\r\n\r\n", 1)[1], data
    with server.connect() as sock:  # HTTP/1.0 has no Host requirement
        sock.sendall(
            b"POST /sentiment HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        data, _ = read_until_closed(sock)
    assert data.split(b" ", 2)[1] == b"200", data


@pytest.mark.anyio
async def test_two_host_headers_are_a_400_in_process(client: httpx.AsyncClient) -> None:
    """The same in-process, on every path (the probes too), in the LibreTranslate API's error shape under its
    prefix; the connection is closed (the body is never read)."""
    two = [("host", "api.example.com"), ("host", "evil.example")]
    r = await client.post("/sentiment", json={"text": "good"}, headers=two)
    assert (r.status_code, r.headers["connection"]) == (400, "close")
    assert r.json() == {"detail": "more than one Host header: send exactly one (RFC 9112)"}
    assert (await client.get("/health", headers=two)).status_code == 400
    r = await client.post(
        "/libretranslate/translate", json={"q": "Bonjour", "source": "fr", "target": "en"}, headers=two
    )
    assert r.status_code == 400
    assert r.json() == {"error": "more than one Host header: send exactly one (RFC 9112)"}
    assert (await client.post("/sentiment", json={"text": "good"}, headers=two[:1])).status_code == 200

"""What an HTTP process's own Python costs per request, in process, without sockets or a model process: the
parts of bench.ceiling's "HTTP µs/item" that are ours (issue 46).

  python -m bench.asgi_stack [--requests 20000] [--checkpoint checkpoints/sentiment-en]

Rows, CPU µs per POST /sentiment of one short text (bench.load's), each the best of 3 runs:
- ASGI stack: the app as `python -m app` builds it (create_app: FastAPI, the gate, the lean path, the body's
  validation, the JSON answer, the metrics and the request id), called with an ASGI scope and a body, around
  a stand-in service whose `answer` returns a fixed SentimentResponse at once (bench-only; never served);
- the same with APP_FAST_PATH=false (FastAPI's own routing and dependencies);
- text work: the checkpoint's text half as an HTTP process loads it (SentimentTask.load_text: tokenizing, an
  n-gram head's words, the result), what RemoteService runs per text before and after the model process's batch.

The rest of bench.ceiling's figure is uvicorn's protocol and the sockets (the bare ASGI row there) and the
channel to the model process (frames, a write and a read per loop pass, a Future per call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.metrics import Metrics
from app.core.settings import Settings
from app.main import create_app
from app.registry import read_entry
from app.schemas import SentimentResponse
from app.tasks.sentiment import SentimentTask
from bench.load import EN_WORDS, texts
from bench.machine import describe
from bench.server import REPO

ANSWER = SentimentResponse.model_validate(
    {
        "model": "sentiment-en",
        "results": [
            {"model": "sentiment-en", "label": "positive", "score": 0.97,
             "probabilities": {"negative": 0.03, "positive": 0.97}},
        ],
    }
)  # fmt: skip


class StandIn:
    """A service that answers every request at once with ANSWER: what is left is the stack around it."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.metrics = settings, Metrics()
        self.registry = self.reason = self.detector = None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def answer(
        self, task: str, req: Any, disconnected: Any = None, **options: Any
    ) -> SentimentResponse:
        return ANSWER


def stack_us(settings: Settings, body: bytes, n: int) -> float:
    """CPU µs per request of the app's ASGI stack on `body` (best of 3 runs of n requests)."""
    app = create_app(settings, StandIn(settings))  # type: ignore[arg-type]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/sentiment", "raw_path": b"/sentiment", "root_path": "", "query_string": b"",
        "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "app": app,
    }  # fmt: skip
    statuses: list[int] = []

    async def one(asgi: Callable[..., Any]) -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays: never a disconnect
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await asgi(dict(scope), receive, send)

    async def run() -> float:
        asgi = app.build_middleware_stack()
        for _ in range(500):
            await one(asgi)
        best = float("inf")
        for _ in range(3):
            cpu = time.process_time()
            for _ in range(n):
                await one(asgi)
            best = min(best, time.process_time() - cpu)
        return 1e6 * best / n

    us = asyncio.run(run())
    if set(statuses) != {200}:
        raise RuntimeError(f"the stack answered {sorted(set(statuses))}, not 200")
    return us


def text_us(checkpoint: Path, inputs: list[str], n: int) -> float:
    """CPU µs per text of the checkpoint's text half: tokenize, then the result of fixed probabilities."""
    entry = read_entry(checkpoint)
    assert entry is not None
    text = SentimentTask().load_text(entry)  # what an HTTP process loads
    probs = [0.25, 0.75]
    best = float("inf")
    for _ in range(3):
        cpu = time.process_time()
        for i in range(n):
            text.tokenize(inputs[i % len(inputs)])
            text.result(probs)
        best = min(best, time.process_time() - cpu)
    return 1e6 * best / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--checkpoint", type=Path, default=REPO / "checkpoints" / "sentiment-en")
    args = p.parse_args(argv)
    inputs = texts(EN_WORDS, lengths=(3, 5, 8, 12))
    request = json.dumps({"text": inputs[0]}).encode()
    lean = Settings(checkpoint_dir=args.checkpoint.parent)
    rows = [
        ("ASGI stack (the lean path, the default)", stack_us(lean, request, args.requests)),
        ("ASGI stack, APP_FAST_PATH=false", stack_us(lean.model_copy(update={"fast_path": False}), request,
                                                     args.requests)),
        (f"text work ({args.checkpoint.name}: tokenize, result)", text_us(args.checkpoint, inputs, args.requests)),
    ]  # fmt: skip
    print(f"# {describe()}; POST /sentiment, one short text, in process, best of 3 runs of {args.requests}\n")
    print("| part | CPU µs per request |\n|---|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

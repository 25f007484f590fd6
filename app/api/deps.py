"""Annotated dependencies: the service, the client-disconnect signal, and both as a model route takes them, the
service's `answer` with the signal bound (the API key: app.edge.api_key).

All are `async def`: FastAPI runs a plain `def` dependency in the thread pool, a thread hop (and a GIL
hand-off with the inference thread) per dependency per request.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import partial
from typing import Annotated, Any

from fastapi import Depends, Request

from app.serving.protocol import Serving


async def get_service(request: Request) -> Serving:
    return request.app.state.service  # type: ignore[no-any-return]


ServiceDep = Annotated[Serving, Depends(get_service)]


async def client_disconnect(request: Request) -> Callable[[], Coroutine[Any, Any, None]]:
    """A coroutine factory that returns once the client has gone away (the body is already read)."""
    return _gone(request)


DisconnectDep = Annotated[Callable[[], Coroutine[Any, Any, None]], Depends(client_disconnect)]
Answer = Callable[..., Coroutine[Any, Any, Any]]  # answer(task name, body, **options) -> the response


async def answer_for(request: Request) -> Answer:
    """The service's `answer` for this request, the client's leaving bound as its `disconnected`: what a model
    route needs, in one dependency (the lean path calls each of a route's dependencies per request)."""
    return partial(request.app.state.service.answer, disconnected=_gone(request))


AnswerDep = Annotated[Answer, Depends(answer_for)]


def _gone(request: Request) -> Callable[[], Coroutine[Any, Any, None]]:
    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return wait

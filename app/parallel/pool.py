"""An HTTP process's channels to the model processes (APP_MODEL_PROCESSES): which one takes a request, and
the server's readiness from theirs.

A request goes whole to one model process, so its items batch together there: the one with the fewest items
in flight from this HTTP process (ties: a start that rotates, so HTTP processes do not all pick the first).
Each model process admits against its share of the limits (app/parallel/shares.py), so one can answer 429
while another has room: the request then tries the others, least loaded first, and is answered 429 only when
every one is full (with the shortest Retry-After). A 429 is raised before any of a request's items is queued,
so trying again elsewhere runs nothing twice.

A model process that dies leaves the rotation (`leave`); its restarted successor, connected again on the same
socket path (`replace`), joins once it has loaded (its first state past "loading": `join`), so its loading
never turns the server's state back to loading.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from app.core.errors import QueueFull
from app.parallel.channel import Channel, ChannelClosed
from app.schemas import ModelInfo, Readiness

State = tuple[Readiness, list[ModelInfo]]
# which model process's state the server shows when they differ: the first not ready, worst first
RANK = {"failed": 0, "loading": 1, "shutting_down": 2, "ready": 3}
GRAPH_RANK = {"failed": 0, "pending": 1, "building": 2, "ready": 3}  # a model's graphs: the least along


class ModelPool:
    def __init__(self) -> None:
        self.channels: list[Channel] = []
        self.in_flight: list[int] = []  # items sent to each and not yet answered (this HTTP process's)
        self.states: list[State | None] = []  # each one's last word (None: not heard yet)
        self.joined: list[bool] = []  # in the rotation and the server's state (not: gone, or reloading)
        self._turn = os.getpid()  # where ties start: differs between HTTP processes, then rotates

    def add(self, channel: Channel) -> int:
        self.channels.append(channel)
        self.in_flight.append(0)
        self.states.append(None)
        self.joined.append(True)  # at start-up the server is ready once every one is
        return len(self.channels) - 1

    def leave(self, i: int) -> None:
        """Model process `i` has gone: out of the rotation and of the server's state."""
        self.joined[i] = False

    def replace(self, i: int, channel: Channel) -> None:
        """A channel to model process `i`'s successor (its calls in flight: none, they failed with the old
        channel); it joins with its first state past loading (`join`)."""
        self.channels[i], self.states[i], self.joined[i] = channel, None, False

    def join(self, i: int) -> bool:
        """Model process `i` back in the rotation once its last word is past loading -> whether it just
        joined."""
        state = self.states[i]
        if self.joined[i] or state is None or state[0].status == "loading":
            return False
        self.joined[i] = True
        return True

    def order(self, stall_s: float) -> list[int]:
        """The live model processes that have spoken within `stall_s`, least loaded first: a silent one
        (stopped, wedged) is out of the rotation until it speaks again."""
        n = len(self.channels)
        self._turn += 1
        live = self.answering(stall_s)
        if len(live) < 2:
            return live
        return sorted(live, key=lambda i: (self.in_flight[i], (i - self._turn) % n))

    def answering(self, stall_s: float) -> list[int]:
        """The model processes in the rotation that are connected and have spoken within `stall_s`."""
        heard = asyncio.get_running_loop().time() - stall_s  # (Channel.silent_for, one clock read for all)
        joined = self.joined
        return [
            i
            for i, c in enumerate(self.channels)
            if joined[i] and not c.closed.done() and c.last_heard >= heard
        ]

    def _live(self) -> list[int]:
        return [i for i, c in enumerate(self.channels) if self.joined[i] and not c.closed.done()]

    async def call(self, items: int, method: str, *args: Any, stall_s: float, **kwargs: Any) -> Any:
        """`method` on the least loaded answering model process (`items`: what the call carries); on a 429
        the next, until one admits it or every one has refused (429 then). ChannelClosed when none is
        left."""
        full: list[QueueFull] = []
        for i in self.order(stall_s):
            self.in_flight[i] += items
            try:
                return await self.channels[i].call(method, *args, **kwargs)
            except QueueFull as e:
                full.append(e)
            finally:
                self.in_flight[i] -= items
        if not full:
            raise ChannelClosed("every model process has gone")
        if len(self.channels) == 1:
            raise full[0]
        first = full[0]
        raise QueueFull(
            f"{first.message} (every one of the {len(self.channels)} model processes is full: each holds its "
            "share of the limit)",
            min(e.retry_after for e in full),
        )

    def silent(self, stall_s: float) -> tuple[int, float] | None:
        """(index, seconds) of the model process silent the longest, once past `stall_s`; else None."""
        quiet = [(self.channels[i].silent_for(), i) for i in self._live()]
        if not quiet or (longest := max(quiet))[0] <= stall_s:
            return None
        return longest[1], longest[0]

    def name(self, i: int) -> str:
        """Model process `i` in a reason: its number among several; nothing when there is one."""
        return f" (model process {i + 1} of {len(self.channels)})" if len(self.channels) > 1 else ""

    def state(self) -> State | None:
        """The server's, from the model processes in the rotation: ready once every one is (with the first
        reason one gives, e.g. an HTTP process restarting); else the first not ready, worst first; None
        until every one has spoken, or when none is in the rotation."""
        joined = [i for i in range(len(self.states)) if self.joined[i]]
        states = [s for i in joined if (s := self.states[i]) is not None]
        if not states or len(states) < len(joined):
            return None
        worst = min(range(len(states)), key=lambda k: RANK[states[k][0].status])
        ready, models = states[worst][0], _graphs_least_along(states[worst][1], states)
        if ready.status == "ready":
            reason = next((s[0].reason for s in states if s[0].reason), None)
            return ready.model_copy(update={"reason": reason}), models
        if ready.reason and len(self.channels) > 1:
            ready = ready.model_copy(update={"reason": f"{ready.reason}{self.name(joined[worst])}"})
        return ready, models


def _graphs_least_along(models: list[ModelInfo], states: list[State]) -> list[ModelInfo]:
    """`models` with each one's `graphs` the least along of any model process's: the server runs a model
    on its graphs once every model process does."""
    least: dict[str, str] = {}
    for _, theirs in states:
        for m in theirs:
            if m.graphs is not None and GRAPH_RANK[m.graphs] < GRAPH_RANK[least.get(m.name, "ready")]:
                least[m.name] = m.graphs
    return [m.model_copy(update={"graphs": least[m.name]}) if m.name in least else m for m in models]

"""A minimum request-body data rate (APP_MIN_BODY_RATE after APP_BODY_RATE_GRACE_S), as Kestrel's
MinRequestBodyDataRate: a client whose head is complete but whose body trickles holds a connection slot for
almost nothing; past the grace period its average rate since the head must stay at or above the minimum.

While the connection table is full, a body below the minimum after PRESSURE_GRACE_S is "lagging" and may be
closed to make room for a new connection (app/edge/connections.py), before its grace period ends.
"""

from __future__ import annotations

from dataclasses import dataclass

# while the table is full: how long a body may lag before its connection can be closed for a new one (a
# client's body follows its head within a round trip; a trickle is below the rate from its first second)
PRESSURE_GRACE_S = 0.25


@dataclass
class BodyRate:
    """Body bytes received since `start` (loop time of the head's end, or of the last restart)."""

    rate: float  # bytes/s; 0 = no minimum
    grace_s: float
    start: float = 0.0
    received: int = 0

    def restart(self, now: float) -> None:
        self.start, self.received = now, 0

    def due(self) -> float:
        """Loop time at which the body falls below the rate if nothing more arrives (inf: no minimum)."""
        if self.rate <= 0:
            return float("inf")
        return self.start + max(self.grace_s, self.received / self.rate)

    def too_slow(self, now: float) -> bool:
        """Past the grace period and below the rate."""
        return self.rate > 0 and now - self.start >= self.grace_s and self._below(now)

    def lagging(self, now: float) -> bool:
        """Below the rate after PRESSURE_GRACE_S (or the grace period, if shorter): closable when full."""
        after = min(self.grace_s, PRESSURE_GRACE_S)
        return self.rate > 0 and now - self.start >= after and self._below(now)

    def _below(self, now: float) -> bool:
        return self.received < self.rate * (now - self.start)

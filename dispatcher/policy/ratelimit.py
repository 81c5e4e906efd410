"""A token bucket per endpoint for ``--rate-limit``: pure arithmetic, clock injected.

The bucket holds at most one token: requests go out evenly spaced, ``1/rate``
apart, so no one-second window ever sees more than ``rate + 1`` of them. A
bucket as deep as the rate would let an idle endpoint take a full second's
worth at once and then the next second's on top: twice the cap within one
second, which is what a receiver's own rate limiter punishes. Claims may run a
little ahead (``horizon``): those requests wait the time :meth:`take` returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable


class TokenBucket:
    """``rate`` requests per second, evenly spaced: never a burst of more than one."""

    def __init__(self, rate: float, clock: Callable[[], float]) -> None:
        """``clock``: monotonic seconds (``time.monotonic`` in the dispatcher)."""
        self.rate = rate
        self.capacity = 1.0
        self._clock = clock
        self._tokens = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self, horizon: float = 0.0) -> int:
        """Requests that may start within ``horizon`` seconds, after those already queued.

        Sizes claims: a request claimed now waits at most ``horizon`` for its turn.
        """
        self._refill()
        # The epsilon: a claimer woken exactly at wait() must not see 0.9999... of a token.
        return max(0, math.floor(self._tokens + horizon * self.rate + 1e-9))

    def wait(self, horizon: float = 0.0) -> float:
        """Seconds until :meth:`available` with this ``horizon`` is at least 1."""
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self.rate - horizon)

    def take(self) -> float:
        """Take one token; returns how long to wait before sending (0 when one was there).

        The debt is recorded at once, so concurrent callers queue up fairly.
        """
        self._refill()
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

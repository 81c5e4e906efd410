"""A token bucket per endpoint for ``--rate-limit``: pure arithmetic, clock injected."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` requests per second on average, bursts of at most ``max(1, rate)``."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self._clock = clock
        self._tokens = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        """Whole requests that may start now (used to size claims)."""
        self._refill()
        return int(self._tokens)

    def take(self) -> float:
        """Take one token; returns how long to wait before sending (0 when one was there).

        The debt is recorded at once, so concurrent callers queue up fairly.
        """
        self._refill()
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    async def acquire(self) -> None:
        wait = self.take()
        if wait > 0:
            await asyncio.sleep(wait)
